// Scalar AdamW: the fallback on CPUs without AVX2, and the tail of the vector path. Same order
// of operations as adamw_avx2.cpp (which fuses some multiply-adds).
#include <cmath>
#include <cstring>

#include "kernels/cpu/adamw.h"

namespace colossal::kernels::cpu::detail {

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);  // NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return static_cast<uint16_t>(bits >> 16);
}

AdamWCoefficients coefficients(const AdamWStep& s) {
  double bc1 = 1.0 - std::pow(static_cast<double>(s.beta1), static_cast<double>(s.step));
  double bc2 = 1.0 - std::pow(static_cast<double>(s.beta2), static_cast<double>(s.step));
  AdamWCoefficients c;
  c.decay = static_cast<float>(1.0 - s.lr * s.weight_decay);
  c.beta1 = static_cast<float>(s.beta1);
  c.one_minus_beta1 = static_cast<float>(1.0 - s.beta1);
  c.beta2 = static_cast<float>(s.beta2);
  c.one_minus_beta2 = static_cast<float>(1.0 - s.beta2);
  c.neg_step_size = static_cast<float>(-(s.lr / bc1));
  c.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
  c.eps = static_cast<float>(s.eps);
  return c;
}

namespace {
// torch::optim::AdamW's sequence of tensor ops, element by element:
//   p.mul_(decay); m.mul_(b1).add_(g, 1-b1); v.mul_(b2).addcmul_(g, g, 1-b2);
//   denom = (v.sqrt() / sqrt(bc2)).add_(eps); p.addcdiv_(m, denom, -step_size)
// ATen's add with alpha is a fused multiply-add; addcmul and addcdiv are not.
inline float update(float p, float& m, float& v, float g, const AdamWCoefficients& c) {
  p *= c.decay;
  m = std::fma(g, c.one_minus_beta1, m * c.beta1);
  v = v * c.beta2 + (c.one_minus_beta2 * g) * g;
  float denom = std::sqrt(v) / c.sqrt_bc2 + c.eps;
  return p + (c.neg_step_size * m) / denom;
}
}  // namespace

void adamw_fp32_scalar(float* p, float* m, float* v, const float* g, int64_t n,
                       const AdamWCoefficients& c) {
  for (int64_t i = 0; i < n; ++i) p[i] = update(p[i], m[i], v[i], g[i], c);
}

void adamw_bf16_scalar(float* master, float* m, float* v, const uint16_t* g, uint16_t* w,
                       int64_t n, const AdamWCoefficients& c) {
  for (int64_t i = 0; i < n; ++i) {
    master[i] = update(master[i], m[i], v[i], bf16_to_float(g[i]), c);
    w[i] = float_to_bf16(master[i]);
  }
}

}  // namespace colossal::kernels::cpu::detail
