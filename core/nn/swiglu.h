#pragma once
// SwiGLU's gate: silu(gate) * up. On the CPU the two ATen operators; on CUDA one kernel forward
// and one backward (kernels/cuda/swiglu), which read the gate and up projections where they lie.
#include <torch/types.h>

namespace colossal::nn {

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up);

}  // namespace colossal::nn
