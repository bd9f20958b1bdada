#include "core/amp/fp8.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "core/common/check.h"

namespace colossal::amp {

const char* to_string(Fp8Format f) { return f == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

c10::ScalarType fp8_dtype(Fp8Format f) {
  return f == Fp8Format::kE4M3 ? c10::ScalarType::Float8_e4m3fn : c10::ScalarType::Float8_e5m2;
}

double fp8_max(Fp8Format f) { return f == Fp8Format::kE4M3 ? 448.0 : 57344.0; }

Fp8Scaling parse_fp8_scaling(const std::string& name) {
  if (name == "current") return Fp8Scaling::kCurrent;
  if (name == "delayed") return Fp8Scaling::kDelayed;
  COLOSSAL_FAIL("[fp8] fp8_scaling '", name, "': expected current or delayed");
}

at::Tensor Fp8Tensor::dequantize(c10::ScalarType dtype) const {
  return (data.to(at::kFloat) / scale).to(dtype);
}

namespace {

// The largest finite magnitude of x: NaN and infinities do not count (they saturate or stay NaN).
double finite_amax(const at::Tensor& x) {
  if (x.numel() == 0) return 0.0;
  return at::nan_to_num(x.detach().to(at::kFloat).abs(), 0.0, 0.0, 0.0).max().item<double>();
}

}  // namespace

double fp8_scale_for(double amax, Fp8Format f, int margin, double fallback) {
  if (!(amax > 0) || !std::isfinite(amax)) return fallback;
  return fp8_max(f) / amax / std::ldexp(1.0, margin);
}

Fp8Tensor quantize_fp8(const at::Tensor& x, Fp8Format f, double scale) {
  COLOSSAL_CHECK(std::isfinite(scale) && scale > 0, "[fp8] scale must be finite and positive, got ", scale);
  const double max = fp8_max(f);
  // clamp() keeps NaN; it turns +-inf into +-max like any other value past the range.
  auto scaled = (x.to(at::kFloat) * scale).clamp(-max, max);
  return {scaled.to(fp8_dtype(f)), at::scalar_tensor(scale, at::kFloat), f};
}

Fp8Tensor quantize_fp8(const at::Tensor& x, Fp8Format f) {
  return quantize_fp8(x, f, fp8_scale_for(finite_amax(x), f));
}

Fp8ScaleTracker::Fp8ScaleTracker(Fp8Format format, Fp8Scaling scaling, int history, int margin)
    : format_(format), scaling_(scaling), history_(history), margin_(margin) {
  COLOSSAL_CHECK(history >= 1, "[fp8] amax history must hold at least 1 step, got ", history);
  COLOSSAL_CHECK(margin >= 0, "[fp8] margin must be >= 0, got ", margin);
}

Fp8Tensor Fp8ScaleTracker::quantize(const at::Tensor& x) {
  auto amax_of = [&] { return finite_amax(x); };
  if (scaling_ == Fp8Scaling::kCurrent || amax_.empty()) {
    const double amax = amax_of();
    scale_ = fp8_scale_for(amax, format_, margin_, scale_);
    auto q = quantize_fp8(x, format_, scale_);
    if (scaling_ == Fp8Scaling::kDelayed) amax_.push_back(amax);
    return q;
  }
  // Delayed: this step's scale comes from the history; this step's amax joins it afterwards.
  const double past = *std::max_element(amax_.begin(), amax_.end());
  scale_ = fp8_scale_for(past, format_, margin_, scale_);
  auto q = quantize_fp8(x, format_, scale_);
  amax_.push_back(amax_of());
  while (static_cast<int>(amax_.size()) > history_) amax_.pop_front();
  return q;
}

}  // namespace colossal::amp
