# ccache on by default. The sloppiness settings are what ccache needs to cache objects built
# against a precompiled header (the PCH embeds timestamps and defines).
if(COLOSSAL_USE_CCACHE)
  find_program(COLOSSAL_CCACHE_PROGRAM ccache)
  if(COLOSSAL_CCACHE_PROGRAM)
    set(_launcher ${CMAKE_COMMAND} -E env
        "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        ${COLOSSAL_CCACHE_PROGRAM})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${_launcher})
    message(STATUS "colossal: ccache enabled (${COLOSSAL_CCACHE_PROGRAM})")
  else()
    message(STATUS "colossal: ccache not found; building without it")
  endif()
endif()
