// K-quant super-blocks: the byte layouts read into the common form, llama.cpp's dequantization,
// the Q8_K activations and the scalar dot product (the vector kernels' reference).
#include "kernels/cpu/kquants.h"

#include "kernels/cpu/kquants_scales.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace colossal::kernels::cpu {
namespace {

int nearest_even(float v) { return static_cast<int>(std::nearbyint(v)); }

}  // namespace

int64_t kquant_block_bytes(WeightFormat f) {
  switch (f) {
    case WeightFormat::kQ2K: return 84;
    case WeightFormat::kQ3K: return 110;
    case WeightFormat::kQ4K: return 144;
    case WeightFormat::kQ5K: return 176;
    case WeightFormat::kQ6K: return 210;
    default: break;
  }
  throw std::invalid_argument(std::string("kquant_block_bytes: ") + to_string(f) + " is not a K-quant format");
}

void unpack_superblock(WeightFormat f, const uint8_t* b, SuperBlock& s) {
  (void)kquant_block_bytes(f);  // throws for a format that is not a K-quant
  SuperBlockScales sc{};
  kquant_unpack_scales(f, b, sc);
  std::memcpy(s.scale, sc.scale, sizeof s.scale);
  std::memcpy(s.min, sc.min, sizeof s.min);
  s.d = sc.d;
  s.dm = sc.dm;
  switch (f) {
    case WeightFormat::kQ4K:
    case WeightFormat::kQ5K: {
      const uint8_t* qh = b + 16;  // Q5_K only
      const uint8_t* qs = f == WeightFormat::kQ4K ? b + 16 : b + 48;
      // Chunk c of 64 weights: the low nibbles of qs[32c..] then the high ones; Q5_K's fifth bit
      // of weight l of sub-block 2c (2c + 1) is bit 2c (2c + 1) of qh[l].
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < 32; ++l) {
          const uint8_t v = qs[32 * c + l];
          int lo = v & 0xF, hi = v >> 4;
          if (f == WeightFormat::kQ5K) {
            lo += ((qh[l] >> (2 * c)) & 1) << 4;
            hi += ((qh[l] >> (2 * c + 1)) & 1) << 4;
          }
          s.q[64 * c + l] = static_cast<uint8_t>(lo);
          s.q[64 * c + 32 + l] = static_cast<uint8_t>(hi);
        }
      return;
    }
    case WeightFormat::kQ6K: {
      // Half n of 128 weights: ql[64n..] low nibbles then high nibbles, two bits each from qh[32n..].
      const uint8_t *ql = b, *qh = b + 128;
      for (int n = 0; n < 2; ++n)
        for (int l = 0; l < 32; ++l) {
          const uint8_t *lo = ql + 64 * n, h = qh[32 * n + l];
          uint8_t* q = s.q + 128 * n;
          q[l] = static_cast<uint8_t>((lo[l] & 0xF) | ((h & 3) << 4));
          q[l + 32] = static_cast<uint8_t>((lo[l + 32] & 0xF) | (((h >> 2) & 3) << 4));
          q[l + 64] = static_cast<uint8_t>((lo[l] >> 4) | (((h >> 4) & 3) << 4));
          q[l + 96] = static_cast<uint8_t>((lo[l + 32] >> 4) | (((h >> 6) & 3) << 4));
        }
      return;
    }
    case WeightFormat::kQ3K: {
      // Half n, shift j: weights 128n + 32j + l take bits 2j..2j+1 of qs[32n + l] and, as +4,
      // bit 4n + j of hmask[l] (llama.cpp subtracts 4 where that bit is clear).
      const uint8_t *hmask = b, *qs = b + 32;
      for (int n = 0; n < 2; ++n)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l)
            s.q[128 * n + 32 * j + l] =
                static_cast<uint8_t>(((qs[32 * n + l] >> (2 * j)) & 3) | (((hmask[l] >> (4 * n + j)) & 1) << 2));
      return;
    }
    default: {  // Q2_K
      const uint8_t* qs = b + 16;
      for (int n = 0; n < 2; ++n)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) s.q[128 * n + 32 * j + l] = static_cast<uint8_t>((qs[32 * n + l] >> (2 * j)) & 3);
      return;
    }
  }
}

void dequantize_kquant(WeightFormat f, const uint8_t* blocks, int64_t n, float* out) {
  const int64_t bytes = kquant_block_bytes(f);
  if (std::strcmp(matvec_implementation(f), "avx2") == 0) return detail::kquant_dequantize_avx2(f, blocks, n, out);
  SuperBlock s;
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    unpack_superblock(f, blocks + b * bytes, s);
    float* y = out + b * kSuperBlock;
    for (int j = 0; j < 16; ++j) {
      // llama.cpp's order of operations: (d * scale) * q - dm * min, or (d * scale) * (q - offset)
      // for the symmetric formats, whose offset is min / scale (32 for Q6_K, 4 for Q3_K).
      const float dl = s.d * static_cast<float>(s.scale[j]);
      if (f == WeightFormat::kQ6K || f == WeightFormat::kQ3K) {
        const int offset = f == WeightFormat::kQ6K ? 32 : 4;
        for (int l = 0; l < 16; ++l) y[16 * j + l] = dl * static_cast<float>(s.q[16 * j + l] - offset);
      } else {
        const float ml = s.dm * static_cast<float>(s.min[j]);
        for (int l = 0; l < 16; ++l) y[16 * j + l] = dl * static_cast<float>(s.q[16 * j + l]) - ml;
      }
    }
  }
}

void quantize_q8k(const float* x, int64_t n, int8_t* q, float* d, int16_t* group_sums) {
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const float* src = x + b * kSuperBlock;
    int8_t* dst = q + b * kSuperBlock;
    float amax = 0, extreme = 0;
    for (int64_t i = 0; i < kSuperBlock; ++i)
      if (std::fabs(src[i]) > amax) amax = std::fabs(src[i]), extreme = src[i];
    if (amax == 0) {
      d[b] = 0;
      std::memset(dst, 0, kSuperBlock);
      std::fill(group_sums + 16 * b, group_sums + 16 * b + 16, int16_t{0});
      continue;
    }
    const float iscale = -127.0f / extreme;
    for (int64_t i = 0; i < kSuperBlock; ++i) dst[i] = static_cast<int8_t>(std::min(127, nearest_even(iscale * src[i])));
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += dst[16 * j + l];
      group_sums[16 * b + j] = static_cast<int16_t>(sum);
    }
    d[b] = 1.0f / iscale;
  }
}

float kquant_dot(WeightFormat f, const uint8_t* row, const int8_t* q, const float* d, const int16_t* group_sums,
                 int64_t n) {
  const int64_t bytes = kquant_block_bytes(f);
  SuperBlock s;
  float acc = 0;
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    unpack_superblock(f, row + b * bytes, s);
    const int8_t* x = q + b * kSuperBlock;
    int32_t sum = 0, mins = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int l = 0; l < 16; ++l) dot += static_cast<int32_t>(s.q[16 * j + l]) * x[16 * j + l];
      sum += s.scale[j] * dot;
      mins += s.min[j] * group_sums[16 * b + j];
    }
    acc += static_cast<float>(sum) * (s.d * d[b]) - static_cast<float>(mins) * (s.dm * d[b]);
  }
  return acc;
}

}  // namespace colossal::kernels::cpu
