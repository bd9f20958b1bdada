# Installing for C++ users:
#   cmake --install build --prefix /opt/colossal
# then, in their project (LibTorch's prefix on CMAKE_PREFIX_PATH too, for find_package(Torch)):
#   find_package(colossal 0.1 REQUIRED)
#   target_link_libraries(app PRIVATE colossal::core colossal::text colossal::llama colossal::vit colossal::recsys colossal::sora)
# The libraries are static; their headers keep the source tree's layout (#include "core/...").
# The Python module installs separately (component "python": pip install ., pyproject.toml).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(COLOSSAL_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/colossal")
set_target_properties(colossal_core PROPERTIES EXPORT_NAME core)
set_target_properties(colossal_kernels PROPERTIES EXPORT_NAME kernels)
set_target_properties(colossal_text PROPERTIES EXPORT_NAME text)
set_target_properties(colossal_llama PROPERTIES EXPORT_NAME llama)
set_target_properties(colossal_vit PROPERTIES EXPORT_NAME vit)
set_target_properties(colossal_recsys PROPERTIES EXPORT_NAME recsys)
set_target_properties(colossal_sora PROPERTIES EXPORT_NAME sora)
install(TARGETS colossal_core colossal_kernels colossal_text colossal_llama colossal_vit colossal_recsys colossal_sora
        EXPORT colossalTargets
        ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT cpp
        LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}" COMPONENT cpp
        INCLUDES DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
foreach(dir core kernels text llama vit recsys sora)
  install(DIRECTORY "${PROJECT_SOURCE_DIR}/${dir}/" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/${dir}"
          COMPONENT cpp FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()
install(EXPORT colossalTargets NAMESPACE colossal:: DESTINATION "${COLOSSAL_INSTALL_CMAKEDIR}" COMPONENT cpp)
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/colossalConfig.cmake.in"
                              "${PROJECT_BINARY_DIR}/colossalConfig.cmake"
                              INSTALL_DESTINATION "${COLOSSAL_INSTALL_CMAKEDIR}")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/colossalConfigVersion.cmake"
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/colossalConfig.cmake" "${PROJECT_BINARY_DIR}/colossalConfigVersion.cmake"
        DESTINATION "${COLOSSAL_INSTALL_CMAKEDIR}" COMPONENT cpp)
