# ccache on by default. The sloppiness settings are what ccache needs to cache objects built
# against a precompiled header (the PCH embeds timestamps and defines).
if(COLOSSAL_USE_CCACHE)
  find_program(COLOSSAL_CCACHE_PROGRAM ccache)
  if(COLOSSAL_CCACHE_PROGRAM)
    # BASEDIR makes paths relative to the checkout, so a fresh clone in another folder (what
    # CI builds) hits the objects of the previous one. The cache lives outside the checkout;
    # scripts/setup.sh sizes it (the LibTorch PCH alone is ~700 MB).
    set(COLOSSAL_CCACHE_DIR "$ENV{HOME}/.cache/colossal-cpp/ccache" CACHE PATH "colossal: ccache directory")
    set(_launcher ${CMAKE_COMMAND} -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "CCACHE_BASEDIR=${PROJECT_SOURCE_DIR}" "CCACHE_NOHASHDIR=1"
        "CCACHE_DIR=${COLOSSAL_CCACHE_DIR}"
        ${COLOSSAL_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
    message(STATUS "colossal: ccache enabled (${COLOSSAL_CCACHE_PROGRAM})")
  else()
    message(STATUS "colossal: ccache not found; building without it")
  endif()
endif()
