# LibTorch comes from the `torch` wheel in the project's virtual environment (scripts/setup.sh),
# located through torch.utils.cmake_prefix_path. An explicit Torch_DIR or CMAKE_PREFIX_PATH wins.
if(NOT Torch_DIR)
  if(NOT COLOSSAL_PYTHON)
    execute_process(COMMAND bash ${PROJECT_SOURCE_DIR}/scripts/setup.sh --python
                    OUTPUT_VARIABLE COLOSSAL_PYTHON OUTPUT_STRIP_TRAILING_WHITESPACE)
  endif()
  if(NOT EXISTS "${COLOSSAL_PYTHON}")
    message(FATAL_ERROR "colossal: no python with torch at '${COLOSSAL_PYTHON}'; run scripts/setup.sh first")
  endif()
  # Without PYTHONPATH: under `pip install .`'s build isolation it points the interpreter at the
  # isolated build environment, which hides the project environment's torch.
  execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE
                          ${COLOSSAL_PYTHON} -c "import torch.utils; print(torch.utils.cmake_prefix_path)"
                  OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _torch_rc)
  if(NOT _torch_rc EQUAL 0)
    message(FATAL_ERROR "colossal: '${COLOSSAL_PYTHON}' cannot import torch; run scripts/setup.sh")
  endif()
  list(APPEND CMAKE_PREFIX_PATH "${_torch_prefix}")
endif()

# The wheel is a CUDA build; its CMake config looks for the toolkit even for CPU-only use.
# Fix the arch list so it does not probe for a GPU (and so nvcc flags are short).
if(NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(ENV{TORCH_CUDA_ARCH_LIST} "9.0")
endif()
# Without a CUDA toolkit (a plain Debian machine, the container image) that probe fails the
# configure ("uses CUDA but I cannot find the CUDA libraries"). Its cuda.cmake returns at once
# when torch::cudart exists, so we make that target ourselves: the wheel's own libcudart, from
# the nvidia package pip installed beside torch. Nothing CUDA is compiled then (COLOSSAL_WITH_CUDA
# defaults OFF without nvcc); the libraries still link against the wheel's libtorch_cuda.
find_program(COLOSSAL_TOOLKIT_NVCC nvcc HINTS ENV CUDACXX ENV CUDA_HOME ENV CUDA_PATH PATH_SUFFIXES bin
             PATHS /usr/local/cuda/bin /opt/cuda/bin)
if(NOT COLOSSAL_TOOLKIT_NVCC AND NOT TARGET torch::cudart)
  # torch/share/cmake: from the interpreter on a first configure, from the cached Torch_DIR on the
  # next ones (pip install . configures the same build directory again).
  set(_colossal_torch_cmake "${_torch_prefix}")
  if(Torch_DIR)
    set(_colossal_torch_cmake "${Torch_DIR}/..")
  endif()
  file(GLOB _colossal_cudart "${_colossal_torch_cmake}/../../../nvidia/*/lib/libcudart.so.*")
  add_library(torch::cudart INTERFACE IMPORTED)
  if(_colossal_cudart)
    list(GET _colossal_cudart 0 _colossal_cudart)
    set_target_properties(torch::cudart PROPERTIES INTERFACE_LINK_LIBRARIES "${_colossal_cudart}")
  endif()
  message(STATUS "colossal: no CUDA toolkit (nvcc) here: LibTorch's CUDA probe skipped, a CPU build "
                 "(cudart: ${_colossal_cudart})")
endif()
find_package(Torch REQUIRED)
message(STATUS "colossal: LibTorch ${Torch_VERSION} from ${TORCH_INSTALL_PREFIX}")

# ATen's at::parallel_for is a header template that opens its OpenMP region in the caller's code:
# compiled without -fopenmp (_OPENMP undefined) it silently runs serially, so every parallel loop
# of ours (AdamW, attention, the matvec kernels, cross entropy) used one thread while libtorch's own
# operators used all of them. Everything that includes ATen is compiled with OpenMP; the program
# loads one libgomp (libtorch's, by its SONAME libgomp.so.1), so there is one thread pool.
find_package(OpenMP REQUIRED COMPONENTS CXX)
