#pragma once
// The scales of a K-quant super-block (per 16 weights: scale, min; and d, dm) unpacked from its
// bytes: shared by the scalar file and the AVX2 one. The functions have internal linkage on
// purpose: each file compiles its own copy with its own instruction set, so the linker can never
// hand the scalar file a copy built with AVX2.
#include <cstdint>
#include <cstring>
#ifdef __F16C__
#include <immintrin.h>
#endif

#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu {
namespace {  // NOLINT(build/namespaces): see above

struct SuperBlockScales {
  int16_t scale[16], min[16];
  float d, dm;
};

inline float kquant_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
#ifdef __F16C__
  return _cvtsh_ss(h);  // the AVX2 file's copy: one instruction
#else
  return half_to_float(h);
#endif
}

// Q4_K/Q5_K: 8 scales and 8 mins of 6 bits in 12 bytes. Bytes 0-3 hold scales 0-3 (low 6 bits),
// bytes 4-7 mins 0-3; scales and mins 4-7 keep their low 4 bits in bytes 8-11 and their top 2
// bits in the spare top bits of bytes 0-7.
inline void kquant_scale_min_k4(const uint8_t* s, int j, int& scale, int& min) {
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
inline void kquant_scales_q3k(const uint8_t* s, int8_t out[16]) {
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

// Per 16 weights j: w = d scale_j q - dm min_j (Q6_K and Q3_K: min_j = offset scale_j, dm = d).
inline void kquant_unpack_scales(WeightFormat f, const uint8_t* b, SuperBlockScales& s) {
  switch (f) {
    case WeightFormat::kQ4K:
    case WeightFormat::kQ5K:
      s.d = kquant_half(b);
      s.dm = kquant_half(b + 2);
      for (int j = 0; j < 8; ++j) {
        int sc, m;
        kquant_scale_min_k4(b + 4, j, sc, m);
        s.scale[2 * j] = s.scale[2 * j + 1] = static_cast<int16_t>(sc);
        s.min[2 * j] = s.min[2 * j + 1] = static_cast<int16_t>(m);
      }
      return;
    case WeightFormat::kQ6K: {
      const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
      s.d = s.dm = kquant_half(b + 208);
      for (int j = 0; j < 16; ++j) {
        s.scale[j] = sc[j];
        s.min[j] = static_cast<int16_t>(32 * sc[j]);
      }
      return;
    }
    case WeightFormat::kQ3K: {
      int8_t sc[16];
      kquant_scales_q3k(b + 96, sc);
      s.d = s.dm = kquant_half(b + 108);
      for (int j = 0; j < 16; ++j) {
        s.scale[j] = sc[j];
        s.min[j] = static_cast<int16_t>(4 * sc[j]);
      }
      return;
    }
    case WeightFormat::kQ2K:
      s.d = kquant_half(b + 80);
      s.dm = kquant_half(b + 82);
      for (int j = 0; j < 16; ++j) {
        s.scale[j] = b[j] & 0xF;
        s.min[j] = b[j] >> 4;
      }
      return;
    default: return;
  }
}

}  // namespace
}  // namespace colossal::kernels::cpu
