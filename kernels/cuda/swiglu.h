#pragma once
// SwiGLU's elementwise part, y = silu(gate) * up, and its backward
//   d_gate = gy * up * sig(gate) * (1 + gate * (1 - sig(gate))),   d_up = gy * silu(gate)
// in one pass each. gate/up are rows of a wider tensor (a fused gate_up projection) or separate
// tensors: each is [rows, width] with its own row stride (in elements); y and the gradients are
// contiguous [rows, width]. Math in fp32, one rounding per output.
#include <cstdint>

#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

struct SwigluShape {
  int64_t rows = 0, width = 0;
  int64_t gate_stride = 0, up_stride = 0;  // elements between rows (>= width)
  DType dtype = DType::f32;
};

void swiglu_forward(const SwigluShape& s, const void* gate, const void* up, void* y, Stream stream);
void swiglu_backward(const SwigluShape& s, const void* grad_y, const void* gate, const void* up, void* grad_gate,
                     void* grad_up, Stream stream);

}  // namespace colossal::kernels::cuda
