#pragma once
// A linear layer's product in FP8 (--mixed_precision fp8): forward quantizes the input and the
// weight to e4m3, backward the output gradient to e5m2, each with its own per-tensor scale
// (fp8.h: current or delayed scaling); the products read the FP8 values and accumulate in fp32,
// and backward keeps only the FP8 input and weight (1 byte an element). The bias and its
// gradient stay in the layer's precision.
//
// On the CPU the FP8 products are emulated: the FP8 values are widened to fp32 and multiplied
// by LibTorch's fp32 GEMM, so they are exactly the products of the FP8 numbers, but no faster.
// On CUDA with FP8 tensor cores, torch._scaled_mm computes the same products natively; that path
// is not built yet.
#include <ATen/core/Tensor.h>

#include <memory>

#include "core/amp/fp8.h"

namespace colossal::amp {

struct Fp8LinearOptions {
  Fp8Scaling scaling = Fp8Scaling::kCurrent;
  int history = 16;  // delayed scaling: steps of amax history
  int margin = 0;    // scale / 2^margin: headroom
  void validate() const;
};

/// One layer's scales across steps (input and weight e4m3, output gradient e5m2).
struct Fp8LinearState {
  explicit Fp8LinearState(const Fp8LinearOptions& o = {});
  Fp8ScaleTracker input, weight, grad_output;
};

/// y = x W^T + b with x and W in e4m3 and the gradient in e5m2. x [..., in], W [out, in].
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const std::shared_ptr<Fp8LinearState>& state);

}  // namespace colossal::amp
