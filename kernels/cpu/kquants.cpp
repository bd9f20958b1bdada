// K-quant super-blocks: the byte layouts read into the common form, llama.cpp's dequantization,
// the Q8_K activations and the scalar dot product (the vector kernels' reference).
#include "kernels/cpu/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace colossal::kernels::cpu {
namespace {

float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return half_to_float(h);
}

// Q4_K/Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes. Bytes 0-3 hold scales 0-3 (low 6 bits),
// bytes 4-7 mins 0-3; scales and mins 4-7 keep their low 4 bits in bytes 8-11 and their top 2
// bits in the spare top bits of bytes 0-7.
void scale_min_k4(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Q3_K: 16 scales of 6 bits in 12 bytes, each stored + 32. The low 4 bits of scales 0-7 are the
// low nibbles of bytes 0-7, those of scales 8-15 the high nibbles; byte 8 + k holds the top 2 bits
// of scales k, k + 4, k + 8 and k + 12 in its bit pairs 0, 2, 4 and 6.
void scales_q3k(const uint8_t* s, int8_t out[16]) {
  uint32_t aux[4];
  std::memcpy(aux, s, 12);
  const uint32_t low4 = 0x0F0F0F0F, low2 = 0x03030303, tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & low4) | (((tmp >> 4) & low2) << 4);
  aux[3] = ((aux[1] >> 4) & low4) | (((tmp >> 6) & low2) << 4);
  aux[0] = (aux[0] & low4) | (((tmp >> 0) & low2) << 4);
  aux[1] = (aux[1] & low4) | (((tmp >> 2) & low2) << 4);
  std::memcpy(out, aux, 16);
  for (int j = 0; j < 16; ++j) out[j] = static_cast<int8_t>(out[j] - 32);
}

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
  switch (f) {
    case WeightFormat::kQ4K:
    case WeightFormat::kQ5K: {
      s.d = half_at(b);
      s.dm = half_at(b + 2);
      const uint8_t* scales = b + 4;
      const uint8_t* qh = b + 16;  // Q5_K only
      const uint8_t* qs = f == WeightFormat::kQ4K ? b + 16 : b + 48;
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        scale_min_k4(scales, j, sc, m);
        s.scale[2 * j] = s.scale[2 * j + 1] = static_cast<int16_t>(sc);
        s.min[2 * j] = s.min[2 * j + 1] = static_cast<int16_t>(m);
      }
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
      const uint8_t *ql = b, *qh = b + 128;
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      s.d = s.dm = half_at(b + 208);
      for (int j = 0; j < 16; ++j) {
        s.scale[j] = sc[j];
        s.min[j] = static_cast<int16_t>(32 * sc[j]);
      }
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
      const uint8_t *hmask = b, *qs = b + 32;
      int8_t sc[16];
      scales_q3k(b + 96, sc);
      s.d = s.dm = half_at(b + 108);
      for (int j = 0; j < 16; ++j) {
        s.scale[j] = sc[j];
        s.min[j] = static_cast<int16_t>(4 * sc[j]);
      }
      // Half n, shift j: weights 128n + 32j + l take bits 2j..2j+1 of qs[32n + l] and, as +4,
      // bit 4n + j of hmask[l] (llama.cpp subtracts 4 where that bit is clear).
      for (int n = 0; n < 2; ++n)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l)
            s.q[128 * n + 32 * j + l] =
                static_cast<uint8_t>(((qs[32 * n + l] >> (2 * j)) & 3) | (((hmask[l] >> (4 * n + j)) & 1) << 2));
      return;
    }
    case WeightFormat::kQ2K: {
      const uint8_t *sc = b, *qs = b + 16;
      s.d = half_at(b + 80);
      s.dm = half_at(b + 82);
      for (int j = 0; j < 16; ++j) {
        s.scale[j] = sc[j] & 0xF;
        s.min[j] = sc[j] >> 4;
      }
      for (int n = 0; n < 2; ++n)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < 32; ++l) s.q[128 * n + 32 * j + l] = static_cast<uint8_t>((qs[32 * n + l] >> (2 * j)) & 3);
      return;
    }
    default: break;
  }
  throw std::invalid_argument(std::string("unpack_superblock: ") + to_string(f) + " is not a K-quant format");
}

void dequantize_kquant(WeightFormat f, const uint8_t* blocks, int64_t n, float* out) {
  const int64_t bytes = kquant_block_bytes(f);
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
