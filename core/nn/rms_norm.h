#pragma once
// RMSNorm as one forward and one backward pass per row:
//   y = w * x / sqrt(mean(x^2) + eps)
// The composed version (pow, mean, add, rsqrt, two multiplies) runs five kernels forward and
// about ten backward, each a pass over the activations plus its dispatch cost. fp32 inputs and
// weight take the fused path; other dtypes compute in fp32 through ATen and cast back, as
// Hugging Face's LlamaRMSNorm does. CUDA tensors whose weight has their dtype (fp32, bf16, fp16)
// take kernels/cuda/rms_norm, which computes the same way (fp32 inside, the normalised value
// rounded to the dtype before the weight multiplies it).
#include <torch/types.h>

namespace colossal::nn {

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

}  // namespace colossal::nn
