// The K-quant matvec for CPUs with AVX2 and FMA (compiled with -mavx2 -mfma -mf16c; chosen at run
// time, also on AVX-512 CPUs in this version). Per super-block the weights are decoded once into
// eight 32-byte vectors of unsigned q (input order) and eight vectors of int16 scales (lanes 0-7:
// the scale of the group's first 16 weights, lanes 8-15: of the next 16), then for each input:
//   maddubs(q, x)      16 int16 pair sums (q <= 63, |x| <= 127: at most 16002, no saturation)
//   madd(., scales)    8 int32, accumulated over the super-block (at most 8 x 4.1M)
//   madd(mins, sums)   the min (offset) terms from the Q8_K group sums
// and the two int32 vectors are scaled by d dx and dm dx into fp32 accumulators.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/kquants.h"

namespace colossal::kernels::cpu::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_hadd_ps(s, s);
  s = _mm_hadd_ps(s, s);
  return _mm_cvtss_f32(s);
}

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

struct Decoded {
  __m256i q[8];
  __m256i scale[8];
  __m256i mins;  // int16 per group of 16
  float d, dm;
};

// Scales per 16 (16 int16 values) into the eight per-32 vectors.
inline void spread_scales(const __m256i per16, Decoded& out) {
  const __m128i lo = _mm256_castsi256_si128(per16), hi = _mm256_extracti128_si256(per16, 1);
  alignas(32) int16_t s[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(s), lo);
  _mm_store_si128(reinterpret_cast<__m128i*>(s + 8), hi);
  for (int g = 0; g < 8; ++g)
    out.scale[g] = _mm256_set_m128i(_mm_set1_epi16(s[2 * g + 1]), _mm_set1_epi16(s[2 * g]));
}

template <WeightFormat F>
inline void decode(const uint8_t* b, Decoded& out) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  if constexpr (F == WeightFormat::kQ4K || F == WeightFormat::kQ5K) {
    out.d = half_at(b);
    out.dm = half_at(b + 2);
    const uint8_t* s = b + 4;
    alignas(16) int16_t mins[16];
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      if (j < 4) {
        sc = s[j] & 63;
        m = s[j + 4] & 63;
      } else {
        sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
      }
      out.scale[j] = _mm256_set1_epi16(static_cast<int16_t>(sc));
      mins[2 * j] = mins[2 * j + 1] = static_cast<int16_t>(m);
    }
    out.mins = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(mins));
    const uint8_t* qs = F == WeightFormat::kQ4K ? b + 16 : b + 48;
    __m256i qh = _mm256_setzero_si256();
    if constexpr (F == WeightFormat::kQ5K) qh = load(b + 16);
    for (int c = 0; c < 4; ++c) {
      const __m256i v = load(qs + 32 * c);
      __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      if constexpr (F == WeightFormat::kQ5K) {
        lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), m1), 4));
        hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), m1), 4));
      }
      out.q[2 * c] = lo;
      out.q[2 * c + 1] = hi;
    }
  } else if constexpr (F == WeightFormat::kQ6K) {
    out.d = out.dm = half_at(b + 208);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
    spread_scales(sc, out);
    out.mins = _mm256_slli_epi16(sc, 5);  // 32 * scale
    for (int n = 0; n < 2; ++n) {
      const __m256i l0 = load(b + 64 * n), l1 = load(b + 64 * n + 32), h = load(b + 128 + 32 * n);
      auto high = [&](int shift) { return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, shift), m2), 4); };
      out.q[4 * n + 0] = _mm256_or_si256(_mm256_and_si256(l0, m4), high(0));
      out.q[4 * n + 1] = _mm256_or_si256(_mm256_and_si256(l1, m4), high(2));
      out.q[4 * n + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), high(4));
      out.q[4 * n + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), high(6));
    }
  } else if constexpr (F == WeightFormat::kQ3K) {
    out.d = out.dm = half_at(b + 108);
    uint32_t aux[4];  // the 16 scales' 6 bits gathered into bytes (kquants.cpp: scales_q3k)
    std::memcpy(aux, b + 96, 12);
    const uint32_t low4 = 0x0F0F0F0F, low2 = 0x03030303, tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & low4) | (((tmp >> 4) & low2) << 4);
    aux[3] = ((aux[1] >> 4) & low4) | (((tmp >> 6) & low2) << 4);
    aux[0] = (aux[0] & low4) | (((tmp >> 0) & low2) << 4);
    aux[1] = (aux[1] & low4) | (((tmp >> 2) & low2) << 4);
    const __m256i sc = _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(aux))),
                                        _mm256_set1_epi16(32));
    spread_scales(sc, out);
    out.mins = _mm256_slli_epi16(sc, 2);  // 4 * scale
    const __m256i hmask = load(b);
    for (int n = 0; n < 2; ++n) {
      const __m256i v = load(b + 32 + 32 * n);
      for (int j = 0; j < 4; ++j) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
        const __m256i third = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * n + j), m1);
        out.q[4 * n + j] = _mm256_or_si256(low, _mm256_slli_epi16(third, 2));
      }
    }
  } else {  // Q2_K
    out.d = half_at(b + 80);
    out.dm = half_at(b + 82);
    const __m256i packed = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
    spread_scales(_mm256_and_si256(packed, _mm256_set1_epi16(0xF)), out);
    out.mins = _mm256_srli_epi16(packed, 4);
    for (int n = 0; n < 2; ++n) {
      const __m256i v = load(b + 16 + 32 * n);
      for (int j = 0; j < 4; ++j) out.q[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(v, 2 * j), m2);
    }
  }
}

template <WeightFormat F, int M>
void rows(const MatrixView& w, const MatvecInput& in, int first, float* y, int64_t ldy, int64_t begin, int64_t end) {
  constexpr int64_t kBytes = F == WeightFormat::kQ2K ? 84 : F == WeightFormat::kQ3K ? 110 : F == WeightFormat::kQ4K ? 144
                             : F == WeightFormat::kQ5K ? 176 : 210;
  const int64_t blocks = w.cols / kSuperBlock, row_bytes = blocks * kBytes;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int8_t* xq = in.q.data() + first * in.stride;
  const int16_t* xs = in.group_sums.data() + first * (in.stride / 16);
  const float* xd = in.block_scale.data() + first * blocks;
  for (int64_t r = begin; r < end; ++r) {
    __m256 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
    const uint8_t* row = base + r * row_bytes;
    for (int64_t b = 0; b < blocks; ++b) {
      Decoded dec;
      decode<F>(row + b * kBytes, dec);
      for (int i = 0; i < M; ++i) {
        const int8_t* x = xq + i * in.stride + b * kSuperBlock;
        __m256i sum = _mm256_setzero_si256();
        for (int g = 0; g < 8; ++g)
          sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_maddubs_epi16(dec.q[g], load(x + 32 * g)), dec.scale[g]));
        const __m256i mins = _mm256_madd_epi16(dec.mins, load(xs + i * (in.stride / 16) + 16 * b));
        const float dx = xd[i * blocks + b];
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(dec.d * dx), acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mins), _mm256_set1_ps(dec.dm * dx), acc[i]);
      }
    }
    for (int i = 0; i < M; ++i) y[(first + i) * ldy + r] = hsum(acc[i]);
  }
}

template <WeightFormat F>
void dispatch(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy, int64_t begin,
              int64_t end) {
  using Rows = void (*)(const MatrixView&, const MatvecInput&, int, float*, int64_t, int64_t, int64_t);
  static constexpr Rows kRows[] = {rows<F, 1>, rows<F, 2>, rows<F, 3>, rows<F, 4>,
                                   rows<F, 5>, rows<F, 6>, rows<F, 7>, rows<F, 8>};
  kRows[std::clamp(count, 1, 8) - 1](w, in, first, y, ldy, begin, end);
}

}  // namespace

void kquant_matvec_avx2(const MatrixView& w, const MatvecInput& in, int first, int count, float* y, int64_t ldy,
                        int64_t begin, int64_t end) {
  switch (w.format) {
    case WeightFormat::kQ2K: return dispatch<WeightFormat::kQ2K>(w, in, first, count, y, ldy, begin, end);
    case WeightFormat::kQ3K: return dispatch<WeightFormat::kQ3K>(w, in, first, count, y, ldy, begin, end);
    case WeightFormat::kQ4K: return dispatch<WeightFormat::kQ4K>(w, in, first, count, y, ldy, begin, end);
    case WeightFormat::kQ5K: return dispatch<WeightFormat::kQ5K>(w, in, first, count, y, ldy, begin, end);
    case WeightFormat::kQ6K: return dispatch<WeightFormat::kQ6K>(w, in, first, count, y, ldy, begin, end);
    default: return;
  }
}

}  // namespace colossal::kernels::cpu::detail
