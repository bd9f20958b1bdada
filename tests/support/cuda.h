#pragma once
// The `cuda`-labelled suites' guard: where no GPU (or no CUDA kernels in this build) is visible a
// test is reported skipped, with the reason, never passed (CTest's SKIP_REGULAR_EXPRESSION).
#include <gtest/gtest.h>

#include "core/cuda/ops.h"

#define COLOSSAL_SKIP_WITHOUT_GPU()                                                                        \
  if (!::colossal::cuda::kernels_usable())                                                                  \
  GTEST_SKIP() << "needs a CUDA GPU and this build's CUDA kernels; none visible here (scripts/gpu_check.sh " \
                  "runs this suite where one is lent)"
