// NF4 quantization (scalar: it runs once per weight) and dequantization (AVX-512 when the CPU
// has it: every forward and backward of a QLoRA layer reads its weight through it).
#include "kernels/cpu/nf4.h"

#include <algorithm>
#include <cmath>

namespace colossal::kernels::cpu {

// bitsandbytes' float32 values of the levels (QLoRA's appendix lists the same to 16 digits).
const float kNf4Values[16] = {-1.0f,
                              -0.6961928009986877f,
                              -0.5250730514526367f,
                              -0.39491748809814453f,
                              -0.28444138169288635f,
                              -0.18477343022823334f,
                              -0.09105003625154495f,
                              0.0f,
                              0.07958029955625534f,
                              0.16093020141124725f,
                              0.24611230194568634f,
                              0.33791524171829224f,
                              0.44070982933044434f,
                              0.5626170039176941f,
                              0.7229568362236023f,
                              1.0f};

void quantize_blockwise(const float* x, int64_t n, int64_t block, const float* table, int levels, uint8_t* index,
                        float* absmax) {
  // Midpoints between neighbouring levels, in float as the reference computes them; an element
  // takes the number of midpoints strictly below it (a value on a midpoint stays below).
  float bounds[255];
  for (int i = 0; i + 1 < levels; ++i) bounds[i] = (table[i] + table[i + 1]) / 2;
  for (int64_t b0 = 0, b = 0; b0 < n; b0 += block, ++b) {
    const int64_t b1 = std::min(n, b0 + block);
    float m = 0;
    for (int64_t i = b0; i < b1; ++i) m = std::max(m, std::fabs(x[i]));
    absmax[b] = m;
    const float inv = 1.0f / std::max(m, 1e-38f);
    for (int64_t i = b0; i < b1; ++i) {
      const float s = std::clamp(x[i] * inv, -1.0f, 1.0f);
      index[i] = static_cast<uint8_t>(std::lower_bound(bounds, bounds + levels - 1, s) - bounds);
    }
  }
}

void nf4_quantize(const float* x, int64_t n, uint8_t* codes, float* absmax) {
  constexpr int64_t kPiece = 4096;  // indices of a few blocks at a time, then packed
  uint8_t index[kPiece];
  for (int64_t p0 = 0; p0 < n; p0 += kPiece) {
    const int64_t len = std::min(kPiece, n - p0);
    quantize_blockwise(x + p0, len, kNf4Block, kNf4Values, 16, index, absmax + p0 / kNf4Block);
    for (int64_t i = 0; i < len; i += 2) {
      // An odd count pads the last low nibble with the level of 0 (index 7), as bitsandbytes does.
      const uint8_t lo = i + 1 < len ? index[i + 1] : 7;
      codes[(p0 + i) / 2] = static_cast<uint8_t>(index[i] << 4 | lo);
    }
  }
}

namespace {
// absmax starts at block `first`.
inline float nf4_element(const uint8_t* codes, const float* absmax, int64_t first, int64_t i) {
  const uint8_t byte = codes[i / 2];
  return kNf4Values[i % 2 == 0 ? byte >> 4 : byte & 0x0F] * absmax[i / kNf4Block - first];
}
}  // namespace

void nf4_dequantize(const uint8_t* codes, const float* absmax, int64_t begin, int64_t end, float* out) {
  const int64_t block0 = begin / kNf4Block;
  int64_t i = begin;
  if (detail::nf4_avx512_supports()) {
    // Scalar up to the first whole block, whole blocks in vectors, scalar for the tail.
    const int64_t first = std::min(end, (begin + kNf4Block - 1) / kNf4Block * kNf4Block);
    for (; i < first; ++i) out[i - begin] = nf4_element(codes, absmax, block0, i);
    const int64_t last = first + (end - first) / kNf4Block * kNf4Block;
    if (last > first)
      detail::nf4_dequantize_avx512(codes, absmax + (first / kNf4Block - block0), first, last, out + (first - begin));
    i = std::max(i, last);
  }
  for (; i < end; ++i) out[i - begin] = nf4_element(codes, absmax, block0, i);
}

const char* nf4_implementation() { return detail::nf4_avx512_supports() ? "avx512" : "scalar"; }

}  // namespace colossal::kernels::cpu
