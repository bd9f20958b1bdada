#pragma once
// RMSNorm as one forward and one backward pass per row:
//   y = w * x / sqrt(mean(x^2) + eps)
// The composed version (pow, mean, add, rsqrt, two multiplies) runs five kernels forward and
// about ten backward, each a pass over the activations plus its dispatch cost. fp32 inputs and
// weight take the fused path; other dtypes compute in fp32 through ATen and cast back, as
// Hugging Face's LlamaRMSNorm does.
#include <torch/types.h>

namespace colossal::nn {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace colossal::nn
