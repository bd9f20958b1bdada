// K-quant quantization (Q4_K, Q5_K, Q6_K) of fp32 weights, as `colossal export --gguf --outtype
// q4_k_m` writes them. The fit is the one llama.cpp's reference quantizer makes without an
// importance matrix (what `llama-quantize` does unless given one), so a file written here is as
// accurate as one it writes from the same weights:
//
//   Q4_K/Q5_K: each group of 32 weights is fitted as scale * q + offset (q in [0, 2^bits - 1],
//   offset <= 0) by weighted least squares, each weight counting |x| + the group's rms; the
//   search starts from the min/max grid and tries a few wider and narrower grids, keeping the
//   fit with the least weighted error. The 8 scales and 8 offsets of a super-block are then
//   stored as 6-bit multiples of d = max scale / 63 and dmin = max offset / 63 (fp16), and the
//   weights are rounded again against the stored, rounded scales.
//   Q6_K: each group of 16 is fitted as scale * q (q in [-32, 31]) with weights x^2, trying 19
//   grids around the extreme value; the 16 scales are stored as int8 multiples of d (fp16).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "kernels/cpu/kquants.h"

namespace colossal::kernels::cpu {
namespace kquant_fit {  // named: the unity build puts the other kernels' helpers beside these

constexpr float kTiny = 1e-15f;  // a group whose largest value is below this is all zeros

int round_even(float v) { return static_cast<int>(std::nearbyint(v)); }
int clamp(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

void store_half(uint8_t* p, float v) {
  const uint16_t h = float_to_half(v);
  std::memcpy(p, &h, 2);
}
float stored_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// x[n] ~ scale * q + offset with q in [0, top] and offset <= 0; returns scale, sets -offset and q.
// `widen` grids: the inverse scale (top + first + step * k) / (max - offset), k = 0 .. widen.
float fit_affine(const float* x, const float* w, int n, int top, float first, float step, int widen, uint8_t* q,
                 float& neg_offset) {
  float lo = x[0], hi = x[0];
  double sum_w = 0, sum_x = 0;
  for (int i = 0; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += static_cast<double>(w[i]) * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi == lo) {
    std::fill(q, q + n, uint8_t{0});
    neg_offset = -lo;
    return 0;
  }
  const float first_inverse = static_cast<float>(top) / (hi - lo);
  float scale = 1 / first_inverse;
  float offset = lo;
  float best = 0;
  for (int i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(clamp(round_even(first_inverse * (x[i] - lo)), 0, top));
    const float e = scale * q[i] + lo - x[i];
    best += w[i] * e * e;
  }
  uint8_t trial[32];
  for (int k = 0; k <= widen; ++k) {
    // Each grid starts from the best offset so far (not the minimum): the search walks towards
    // the fit, which measurably lowers the error (about 1% against grids fixed at the minimum).
    const float inverse = (first + step * static_cast<float>(k) + static_cast<float>(top)) / (hi - offset);
    // The sums in double: the determinant below cancels most of its digits. (llama.cpp's float
    // sums pick a different fit in about 2% of super-blocks, with no gain in error.)
    double sum_q = 0, sum_qq = 0, sum_qx = 0;
    for (int i = 0; i < n; ++i) {
      const int v = clamp(round_even(inverse * (x[i] - offset)), 0, top);
      trial[i] = static_cast<uint8_t>(v);
      sum_q += static_cast<double>(w[i]) * v;
      sum_qq += static_cast<double>(w[i]) * v * v;
      sum_qx += static_cast<double>(w[i]) * v * x[i];
    }
    // The weighted least-squares line through (q, x); an offset above zero is pinned at zero.
    const double det = sum_w * sum_qq - sum_q * sum_q;
    if (det <= 0) continue;
    double s = (sum_w * sum_qx - sum_x * sum_q) / det;
    double o = (sum_qq * sum_x - sum_q * sum_qx) / det;
    if (o > 0) {
      o = 0;
      s = sum_qx / sum_qq;
    }
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const float e = static_cast<float>(s) * trial[i] + static_cast<float>(o) - x[i];
      err += w[i] * e * e;
    }
    if (err < best) {
      std::memcpy(q, trial, static_cast<size_t>(n));
      best = err;
      scale = static_cast<float>(s);
      offset = static_cast<float>(o);
    }
  }
  neg_offset = -offset;
  return scale;
}

// Q4_K (bits 4) or Q5_K (bits 5): one super-block of 256 weights into `out`.
void quantize_affine_block(const float* x, int bits, uint8_t* out) {
  const int top = (1 << bits) - 1;
  const float first = bits == 4 ? -1.0f : -0.5f;
  const int widen = bits == 4 ? 20 : 15;
  float scales[8], offsets[8], weights[32];
  uint8_t q[kSuperBlock];
  float max_scale = 0, max_offset = 0;
  for (int j = 0; j < 8; ++j) {
    const float* g = x + 32 * j;
    float sum_sq = 0;
    for (int l = 0; l < 32; ++l) sum_sq += g[l] * g[l];
    const float rms = std::sqrt(sum_sq / 32);
    for (int l = 0; l < 32; ++l) weights[l] = rms + std::fabs(g[l]);
    scales[j] = fit_affine(g, weights, 32, top, first, 0.1f, widen, q + 32 * j, offsets[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_offset = std::max(max_offset, offsets[j]);
  }
  // Bytes: d, dmin (fp16), 12 bytes of 6-bit scales and offsets (the layout kquants_scales.h reads).
  uint8_t* packed = out + 4;
  std::memset(packed, 0, 12);
  const float to_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float to_offset = max_offset > 0 ? 63.0f / max_offset : 0.0f;
  int ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min(63, round_even(to_scale * scales[j]));
    lm[j] = std::min(63, round_even(to_offset * offsets[j]));
    if (j < 4) {
      packed[j] = static_cast<uint8_t>(ls[j]);
      packed[j + 4] = static_cast<uint8_t>(lm[j]);
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      packed[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      packed[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
  store_half(out, max_scale / 63.0f);
  store_half(out + 2, max_offset / 63.0f);
  const float d = stored_half(out), dmin = stored_half(out + 2);
  // Round again against what a reader will multiply by.
  for (int j = 0; j < 8; ++j) {
    const float s = d * static_cast<float>(ls[j]);
    if (s == 0) continue;
    const float o = dmin * static_cast<float>(lm[j]);
    for (int l = 0; l < 32; ++l) q[32 * j + l] = static_cast<uint8_t>(clamp(round_even((x[32 * j + l] + o) / s), 0, top));
  }
  // Chunk c of 64 weights: the low 4 bits of weights 64c + l and 64c + 32 + l share byte 32c + l;
  // Q5_K's fifth bits go to bit 2c (2c + 1) of qh[l].
  uint8_t* qh = out + 16;
  uint8_t* qs = bits == 4 ? out + 16 : out + 48;
  if (bits == 5) std::memset(qh, 0, 32);
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      const int lo = q[64 * c + l], hi = q[64 * c + 32 + l];
      qs[32 * c + l] = static_cast<uint8_t>((lo & 0xF) | ((hi & 0xF) << 4));
      if (bits == 5) qh[l] |= static_cast<uint8_t>(((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1)));
    }
}

// x[16] ~ scale * q with q in [-32, 31] (returned in l as q), weights x^2; returns scale.
float fit_symmetric(const float* x, int8_t* l) {
  float amax = 0, extreme = 0;
  for (int i = 0; i < 16; ++i)
    if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), extreme = x[i];
  if (amax < kTiny) {
    std::fill(l, l + 16, int8_t{0});
    return 0;
  }
  auto levels = [&](float inverse, float& sum_lx, float& sum_ll, bool keep) {
    sum_lx = sum_ll = 0;
    for (int i = 0; i < 16; ++i) {
      const int v = clamp(round_even(inverse * x[i]), -32, 31);
      if (keep) l[i] = static_cast<int8_t>(v);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * v;
      sum_ll += w * v * v;
    }
  };
  float sum_lx, sum_ll;
  levels(-32.0f / extreme, sum_lx, sum_ll, true);
  float scale = sum_ll ? sum_lx / sum_ll : 0.0f;
  float best = scale * sum_lx;  // the weighted error's reduction: larger is better
  for (int k = -9; k <= 9; ++k) {
    if (k == 0) continue;
    const float inverse = -(32.0f + 0.1f * static_cast<float>(k)) / extreme;
    levels(inverse, sum_lx, sum_ll, false);
    if (sum_ll > 0 && sum_lx * sum_lx > best * sum_ll) {
      levels(inverse, sum_lx, sum_ll, true);
      scale = sum_lx / sum_ll;
      best = scale * sum_lx;
    }
  }
  return scale;
}

void quantize_q6k_block(const float* x, uint8_t* out) {
  std::memset(out, 0, 210);
  int8_t l[kSuperBlock];
  float scales[16], max_abs = 0, max_scale = 0;
  for (int g = 0; g < 16; ++g) {
    scales[g] = fit_symmetric(x + 16 * g, l + 16 * g);
    if (std::fabs(scales[g]) > max_abs) max_abs = std::fabs(scales[g]), max_scale = scales[g];
  }
  if (max_abs < kTiny) return;  // all zeros: d = 0
  const float to_level = -128.0f / max_scale;
  store_half(out + 208, 1 / to_level);
  const float d = stored_half(out + 208);
  auto* sc = reinterpret_cast<int8_t*>(out + 192);
  uint8_t q[kSuperBlock] = {};
  for (int g = 0; g < 16; ++g) {
    sc[g] = static_cast<int8_t>(std::min(127, round_even(to_level * scales[g])));
    const float s = d * static_cast<float>(sc[g]);
    if (s == 0) continue;
    for (int i = 0; i < 16; ++i) q[16 * g + i] = static_cast<uint8_t>(clamp(round_even(x[16 * g + i] / s), -32, 31) + 32);
  }
  // Half h of 128 weights: ql[64h + l] holds the low 4 bits of weights l (low nibble) and l + 64
  // (high), ql[64h + 32 + l] those of l + 32 and l + 96; qh[32h + l] their top 2 bits in order.
  uint8_t *ql = out, *qh = out + 128;
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 32; ++i) {
      const uint8_t* v = q + 128 * h;
      ql[64 * h + i] = static_cast<uint8_t>((v[i] & 0xF) | ((v[i + 64] & 0xF) << 4));
      ql[64 * h + 32 + i] = static_cast<uint8_t>((v[i + 32] & 0xF) | ((v[i + 96] & 0xF) << 4));
      qh[32 * h + i] = static_cast<uint8_t>((v[i] >> 4) | ((v[i + 32] >> 4) << 2) | ((v[i + 64] >> 4) << 4) |
                                            ((v[i + 96] >> 4) << 6));
    }
}

}  // namespace kquant_fit

void quantize_kquant(WeightFormat f, const float* x, int64_t n, uint8_t* blocks) {
  if (n % kSuperBlock != 0)
    throw std::invalid_argument("quantize_kquant: " + std::to_string(n) + " values are not whole super-blocks of " +
                                std::to_string(kSuperBlock));
  const int64_t bytes = kquant_block_bytes(f);
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* src = x + b * kSuperBlock;
    uint8_t* dst = blocks + b * bytes;
    switch (f) {
      case WeightFormat::kQ4K: kquant_fit::quantize_affine_block(src, 4, dst); break;
      case WeightFormat::kQ5K: kquant_fit::quantize_affine_block(src, 5, dst); break;
      case WeightFormat::kQ6K: kquant_fit::quantize_q6k_block(src, dst); break;
      default:
        throw std::invalid_argument(std::string("quantize_kquant: ") + to_string(f) +
                                    " is read, not written (written: q4_k, q5_k, q6_k)");
    }
  }
}

}  // namespace colossal::kernels::cpu
