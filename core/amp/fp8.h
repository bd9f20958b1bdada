#pragma once
// FP8: the two 8-bit float formats of mixed-precision training and their per-tensor scaling.
//
//   e4m3 (float8_e4m3fn)  4 exponent bits, 3 mantissa bits, largest 448, no infinities:
//                          activations and weights in forward
//   e5m2 (float8_e5m2)    5 exponent bits, 2 mantissa bits, largest 57344: gradients in backward
//
// A tensor x is stored as q = fp8(clamp(x * scale, -max, max)) and read back as q / scale. The
// scale puts the tensor's largest magnitude (amax) at the format's largest value:
// scale = max / amax, divided by 2^margin for headroom. Values past the range saturate to +-max
// (a bare cast would make them NaN in e4m3), NaN stays NaN, and a zero or non-finite amax keeps
// the previous scale. Rounding is LibTorch's cast: to nearest, ties to even.
//
// Scaling recipes (`--fp8_scaling`):
//   current   the scale from this tensor's own amax (one extra pass over it)
//   delayed   the scale from the largest amax of the last `history` steps (Transformer Engine's
//             recipe): the scale is known before the cast (a GPU kernel fuses the amax into
//             it), and the amax of this step joins the history.
// amax counts finite values only.
#include <ATen/core/Tensor.h>

#include <deque>
#include <string>

namespace colossal::amp {

enum class Fp8Format { kE4M3, kE5M2 };
const char* to_string(Fp8Format f);
c10::ScalarType fp8_dtype(Fp8Format f);
/// The largest finite magnitude: 448 (e4m3), 57344 (e5m2).
double fp8_max(Fp8Format f);

enum class Fp8Scaling { kCurrent, kDelayed };
/// "current" | "delayed"; anything else throws listing them.
Fp8Scaling parse_fp8_scaling(const std::string& name);

/// A tensor in FP8 with its scale: values = data / scale.
struct Fp8Tensor {
  at::Tensor data;   // float8_e4m3fn or float8_e5m2, the original shape
  at::Tensor scale;  // fp32 scalar
  Fp8Format format = Fp8Format::kE4M3;
  at::Tensor dequantize(c10::ScalarType dtype = c10::kFloat) const;
};

/// max / amax / 2^margin; `fallback` when amax is zero or not finite.
double fp8_scale_for(double amax, Fp8Format f, int margin = 0, double fallback = 1.0);

/// q = fp8(clamp(x * scale, -max, max)): saturating, NaN kept.
Fp8Tensor quantize_fp8(const at::Tensor& x, Fp8Format f, double scale);
/// With the scale from x's own amax (current scaling).
Fp8Tensor quantize_fp8(const at::Tensor& x, Fp8Format f);

/// The scale of one tensor role (a layer's input, weight or output gradient) across steps.
class Fp8ScaleTracker {
 public:
  explicit Fp8ScaleTracker(Fp8Format format = Fp8Format::kE4M3, Fp8Scaling scaling = Fp8Scaling::kCurrent,
                           int history = 16, int margin = 0);
  /// Quantizes x: current scaling measures x first; delayed uses the history's scale, then
  /// records x's amax (the first call, with no history, measures x).
  Fp8Tensor quantize(const at::Tensor& x);
  double scale() const { return scale_; }
  Fp8Format format() const { return format_; }

 private:
  Fp8Format format_;
  Fp8Scaling scaling_;
  int history_, margin_;
  double scale_ = 1.0;
  std::deque<double> amax_;
};

}  // namespace colossal::amp
