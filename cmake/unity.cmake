# Unity builds: each target's sources are compiled in batches of COLOSSAL_UNITY_BATCH files, one
# translation unit per batch. Why: merely loading the LibTorch PCH costs ~7 s of CPU per
# translation unit on the 2-core CI machine (an empty file against it: 7.0 s user), and with ~200
# heavy files that load alone was ~12 of a clean build's ~25 minutes. Batching pays it once per
# batch. The price is coarser incremental rebuilds (an edit recompiles its batch), so developers
# iterating on one file may prefer -DCOLOSSAL_UNITY_BUILD=OFF; CI and first builds want it on.
#
# Files in one batch share a translation unit, so file-local helpers (anonymous namespaces,
# statics) must not repeat a name another file of the same target defines; the build fails
# loudly where they do. Files with their own flags (light files, ISA-specific kernels, the NCCL
# backend) are kept out of the batches with SKIP_UNITY_BUILD_INCLUSION.
set(COLOSSAL_UNITY_BATCH 8 CACHE STRING "colossal: source files per unity batch")
if(COLOSSAL_UNITY_BUILD)
  set(CMAKE_UNITY_BUILD ON)
  set(CMAKE_UNITY_BUILD_BATCH_SIZE ${COLOSSAL_UNITY_BATCH})
endif()
