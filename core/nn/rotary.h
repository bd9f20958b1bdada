#pragma once
// Rotary position embedding ("rotate half", Hugging Face LLaMA) of x [B, T, H, D] at positions
// [T] (int64), or [B, T] (each sequence its own, as in packed batches), with fp32 tables [P, D].
// On the CPU the composed ATen version (tables gathered and cast to x's dtype, x * cos +
// rotate_half(x) * sin); on CUDA with [T] positions one kernel forward and one backward
// (kernels/cuda/rope: the same products in fp32 with the tables rounded to x's dtype first).
#include <torch/types.h>

namespace colossal::nn {

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                           const torch::Tensor& positions);

}  // namespace colossal::nn
