#pragma once
// A linear layer's product in FP8 (--mixed_precision fp8): forward quantizes the input and the
// weight to e4m3, backward the output gradient to e5m2, each with its own per-tensor scale
// (fp8.h: current or delayed scaling); the products read the FP8 values and accumulate in fp32,
// and backward keeps only the FP8 input and weight (1 byte an element). The bias and its
// gradient stay in the layer's precision.
//
// On the CPU the FP8 products are emulated: the FP8 values are widened to fp32 and multiplied
// by LibTorch's fp32 GEMM, so they are exactly the products of the FP8 numbers, but no faster.
// On CUDA, fp8_matmul_nt hands them to torch._scaled_mm (FP8 tensor cores, compute capability
// 8.9+; every dimension a multiple of 16, as cuBLASLt asks), falling back to the emulation once
// and for all, with a warning, where the device refuses. That path has not run on a GPU yet.
#include <ATen/core/Tensor.h>

#include <memory>
#include <utility>

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

/// a b^T for FP8 matrices a [m, k] and b [n, k] (their scales dequantize the product), in
/// `out_dtype`: natively on CUDA where the device multiplies FP8, else emulated in fp32.
at::Tensor fp8_matmul_nt(const Fp8Tensor& a, const Fp8Tensor& b, c10::ScalarType out_dtype);

/// A linear layer's products from FP8 operands x [..., in], W [out, in] and the output gradient
/// g [..., out]: y = x W^T, and backward's dx = g W and dW = g^T x (fp8_linear's, and the grids').
at::Tensor fp8_linear_output(const Fp8Tensor& x, const Fp8Tensor& w, c10::ScalarType dtype);
std::pair<at::Tensor, at::Tensor> fp8_linear_gradients(const Fp8Tensor& g, const Fp8Tensor& x, const Fp8Tensor& w,
                                                       c10::ScalarType x_dtype, c10::ScalarType w_dtype);

/// y = x W^T + b with x and W in e4m3 and the gradient in e5m2. x [..., in], W [out, in].
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const std::shared_ptr<Fp8LinearState>& state);

}  // namespace colossal::amp
