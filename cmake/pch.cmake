# Precompiled LibTorch headers. The PCH (core/common/pch.h: <torch/torch.h> and c10d) is ~700 MB,
# and loading it costs seconds per translation unit, so it only pays where a file really includes
# the heavy headers (measured: a torch/torch.h test file 24 s -> 13 s; a file that needs only
# c10's Exception.h 1 s -> 5 s). Light files are listed with colossal_light_sources() and
# compile without it, and outside the unity batches (cmake/unity.cmake), which use the PCH.
function(colossal_light_sources)
  if(COLOSSAL_USE_PCH)
    set_source_files_properties(${ARGN} DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
                                PROPERTIES SKIP_PRECOMPILE_HEADERS ON SKIP_UNITY_BUILD_INCLUSION ON)
  endif()
endfunction()
