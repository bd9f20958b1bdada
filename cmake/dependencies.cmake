# Third-party libraries from Debian (scripts/setup.sh installs them).
find_package(nlohmann_json 3.10 REQUIRED)
find_package(CLI11 REQUIRED)
find_package(yaml-cpp REQUIRED)
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)  # core/data/r_data (R's data files), the models' checkpoints

# Gloo: only the headers, for ProcessGroupGloo.hpp; never linked (LibTorch carries its own Gloo).
find_path(COLOSSAL_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(NOT COLOSSAL_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "colossal: Gloo headers not found (Debian package libgloo-dev); run scripts/setup.sh")
endif()
