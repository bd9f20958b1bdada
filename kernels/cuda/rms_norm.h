#pragma once
// RMSNorm over the last dimension, as Hugging Face's LlamaRMSNorm computes it:
//   t = to_dtype(x * rsqrt(mean(x^2) + eps)) (in fp32),  y = to_dtype(w * t)
// x, w, y and the gradients share one storage type (fp32, bf16 or fp16); sums in fp32.
// Forward keeps rstd per row (fp32) for backward. Backward gives grad_x in one pass per row and
// grad_w as per-block partial sums reduced in a fixed order (deterministic).
#include <cstdint>

#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

struct RmsNormShape {
  int64_t rows = 0, dim = 0;
  DType dtype = DType::f32;
};

void rms_norm_forward(const RmsNormShape& s, const void* x, const void* weight, float eps, void* y, float* rstd,
                      Stream stream);

/// Blocks backward uses (the rows of the fp32 workspace it needs: rms_norm_backward_workspace floats).
int64_t rms_norm_backward_workspace(const RmsNormShape& s);
void rms_norm_backward(const RmsNormShape& s, const void* grad_y, const void* x, const void* weight,
                       const float* rstd, void* grad_x, void* grad_weight, float* workspace, Stream stream);

}  // namespace colossal::kernels::cuda
