// The K-quant matvec and dequantization for CPUs with AVX2 and FMA (compiled with -mavx2 -mfma
// -mf16c; chosen at run time, also on AVX-512 CPUs in this version). Per super-block the scales
// are unpacked once; then for each group of 32 weights the unsigned q are decoded into one
// 32-byte vector and, for every input (up to 8 share the decode):
//   maddubs(q, x)      16 int16 pair sums (q <= 63, |x| <= 127: at most 16002, no saturation)
//   madd(., scales)    8 int32 (lanes 0-3 the group's first 16 weights, 4-7 the next 16),
//                      accumulated over the super-block (at most 8 x 4.1M)
// and per super-block one madd of the mins with the Q8_K group sums, then both int32 vectors are
// scaled by d dx and dm dx into fp32 accumulators. One group at a time keeps the decoded weights
// and the inputs' int32 sums within the 16 vector registers.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/kquants.h"
#include "kernels/cpu/kquants_scales.h"

namespace colossal::kernels::cpu::detail {
namespace {

inline __m256i load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

template <WeightFormat F>
constexpr int64_t block_bytes() {
  return F == WeightFormat::kQ2K ? 84 : F == WeightFormat::kQ3K ? 110 : F == WeightFormat::kQ4K ? 144
         : F == WeightFormat::kQ5K ? 176 : 210;
}

// The unsigned q of weights 32g .. 32g + 31 of super-block b, in order.
template <WeightFormat F, int G>
inline __m256i group_q(const uint8_t* b) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(3), m1 = _mm256_set1_epi8(1);
  if constexpr (F == WeightFormat::kQ4K || F == WeightFormat::kQ5K) {
    const __m256i v = load(b + (F == WeightFormat::kQ4K ? 16 : 48) + 32 * (G / 2));
    __m256i q = G % 2 == 0 ? _mm256_and_si256(v, m4) : _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if constexpr (F == WeightFormat::kQ5K)  // the fifth bit: bit G of qh[l]
      q = _mm256_or_si256(q, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(load(b + 16), G), m1), 4));
    return q;
  } else if constexpr (F == WeightFormat::kQ6K) {
    constexpr int n = G / 4, k = G % 4;
    const __m256i l = load(b + 64 * n + 32 * (k % 2));
    const __m256i low = k < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
    const __m256i high = _mm256_and_si256(_mm256_srli_epi16(load(b + 128 + 32 * n), 2 * k), m2);
    return _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
  } else if constexpr (F == WeightFormat::kQ3K) {
    constexpr int n = G / 4, j = G % 4;
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(load(b + 32 + 32 * n), 2 * j), m2);
    const __m256i third = _mm256_and_si256(_mm256_srli_epi16(load(b), 4 * n + j), m1);
    return _mm256_or_si256(low, _mm256_slli_epi16(third, 2));
  } else {  // Q2_K
    constexpr int n = G / 4, j = G % 4;
    return _mm256_and_si256(_mm256_srli_epi16(load(b + 16 + 32 * n), 2 * j), m2);
  }
}

// Lanes 0-7: the scale of the group's first 16 weights; lanes 8-15: of the next 16.
inline __m256i group_scales(const SuperBlockScales& s, int g) {
  return _mm256_set_m128i(_mm_set1_epi16(s.scale[2 * g + 1]), _mm_set1_epi16(s.scale[2 * g]));
}

// Adds group G's products to every input's int32 sums: maddubs(q, x), then madd with the group's
// scales (scale(G): lanes 0-7 the scale of its first 16 weights, 8-15 of the next 16).
template <WeightFormat F, int M, int G, typename Scale>
inline void accumulate(const uint8_t* b, const Scale& scale, const int8_t* x, int64_t stride, __m256i* sum) {
  const __m256i q = group_q<F, G>(b), sc = scale(G);
  for (int i = 0; i < M; ++i)
    sum[i] = _mm256_add_epi32(sum[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, load(x + i * stride + 32 * G)), sc));
  if constexpr (G < 7) accumulate<F, M, G + 1>(b, scale, x, stride, sum);
}

// Q4_K/Q5_K: the 8 scales and 8 mins (6 bits each, one per 32 weights) from their 12 bytes
// (kquants_scales.h's layout) with a few 32-bit operations instead of a scalar loop: `scales` holds
// the 8 scales as int16 in both 128-bit halves (group g's is picked by a byte shuffle), `mins` the
// 8 mins as 16 int16, each twice (the Q8_K sums they multiply are per 16).
inline void k4_scales(const uint8_t* b, __m256i& scales, __m256i& mins) {
  uint32_t u[3];
  std::memcpy(u, b + 4, 12);
  constexpr uint32_t m6 = 0x3F3F3F3F, m4 = 0x0F0F0F0F, m2 = 0x03030303;
  const uint32_t s03 = u[0] & m6, n03 = u[1] & m6;
  const uint32_t s47 = (u[2] & m4) | (((u[0] >> 6) & m2) << 4), n47 = ((u[2] >> 4) & m4) | (((u[1] >> 6) & m2) << 4);
  const __m128i bytes = _mm_set_epi32(static_cast<int>(n47), static_cast<int>(n03), static_cast<int>(s47),
                                      static_cast<int>(s03));  // scales 0-7, mins 0-7
  scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(bytes));
  mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(bytes, _mm_setr_epi8(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14,
                                                                    15, 15)));
}

// Q6_K: its 16 int8 scales (one per 16 weights) as int16, scales 0-7 in both halves of `low`,
// 8-15 in both halves of `high`, and the mins as 32 x each scale (q - 32 as q with a min).
inline void q6k_scales(const uint8_t* b, __m256i& low, __m256i& high, __m256i& mins) {
  const __m256i all = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)));
  low = _mm256_permute2x128_si256(all, all, 0x00);
  high = _mm256_permute2x128_si256(all, all, 0x11);
  mins = _mm256_slli_epi16(all, 5);
}

template <WeightFormat F, int M>
void rows(const MatrixView& w, const MatvecInput& in, int first, float* y, int64_t ldy, int64_t begin, int64_t end) {
  constexpr int64_t kBytes = block_bytes<F>();
  const int64_t blocks = w.cols / kSuperBlock, row_bytes = blocks * kBytes, groups = in.stride / 16;
  const auto* base = static_cast<const uint8_t*>(w.data);
  const int8_t* xq = in.q.data() + first * in.stride;
  const int16_t* xs = in.group_sums.data() + first * groups;
  const float* xd = in.block_scale.data() + first * blocks;
  for (int64_t r = begin; r < end; ++r) {
    __m256 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm256_setzero_ps();
    const uint8_t* row = base + r * row_bytes;
    for (int64_t k = 0; k < blocks; ++k) {
      const uint8_t* b = row + k * kBytes;
      __m256i sum[M], mins;
      float d, dm;
      for (int i = 0; i < M; ++i) sum[i] = _mm256_setzero_si256();
      if constexpr (F == WeightFormat::kQ4K || F == WeightFormat::kQ5K) {
        __m256i scales;
        k4_scales(b, scales, mins);
        d = kquant_half(b);
        dm = kquant_half(b + 2);
        // One scale per 32: int16 element g of either half, picked by a byte shuffle.
        auto scale = [&](int g) { return _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<int16_t>(
                                                                         (2 * g) | ((2 * g + 1) << 8)))); };
        accumulate<F, M, 0>(b, scale, xq + k * kSuperBlock, in.stride, sum);
      } else if constexpr (F == WeightFormat::kQ6K) {
        __m256i low, high;
        q6k_scales(b, low, high, mins);
        d = dm = kquant_half(b + 208);
        // Scales 2g and 2g + 1 (one per 16): int16 elements e and e + 1 of the half holding them.
        auto scale = [&](int g) {
          const int e = (2 * g) % 8;
          const __m256i pick = _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>((2 * e + 2) | ((2 * e + 3) << 8))),
                                                _mm_set1_epi16(static_cast<int16_t>((2 * e) | ((2 * e + 1) << 8))));
          return _mm256_shuffle_epi8(g < 4 ? low : high, pick);
        };
        accumulate<F, M, 0>(b, scale, xq + k * kSuperBlock, in.stride, sum);
      } else {
        SuperBlockScales s;
        kquant_unpack_scales(F, b, s);
        d = s.d;
        dm = s.dm;
        auto scale = [&](int g) { return group_scales(s, g); };
        accumulate<F, M, 0>(b, scale, xq + k * kSuperBlock, in.stride, sum);
        mins = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s.min));
      }
      for (int i = 0; i < M; ++i) {
        const __m256i m = _mm256_madd_epi16(mins, load(xs + i * groups + 16 * k));
        const float dx = xd[i * blocks + k];
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[i]), _mm256_set1_ps(d * dx), acc[i]);
        acc[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(dm * dx), acc[i]);
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

// 8 q of a group (bytes 8h .. 8h + 7 of its vector) widened to fp32.
inline __m256 widen8(__m256i q, int h) {
  const __m128i half = h < 2 ? _mm256_castsi256_si128(q) : _mm256_extracti128_si256(q, 1);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h % 2 == 0 ? half : _mm_srli_si128(half, 8)));
}

template <WeightFormat F, int G>
inline void dequantize_groups(const uint8_t* b, const SuperBlockScales& s, float* out) {
  const __m256i q = group_q<F, G>(b);
  for (int h = 0; h < 4; ++h) {
    const int j = 2 * G + h / 2;  // the group of 16 these 8 weights belong to
    // llama.cpp's order of operations, unfused (the scalar file's -ffp-contract=off): (d scale) q
    // - dm min, or (d scale) (q - offset) for Q6_K and Q3_K.
    const __m256 dl = _mm256_set1_ps(s.d * static_cast<float>(s.scale[j]));
    __m256 v;
    if constexpr (F == WeightFormat::kQ6K || F == WeightFormat::kQ3K)
      v = _mm256_mul_ps(dl, _mm256_sub_ps(widen8(q, h), _mm256_set1_ps(F == WeightFormat::kQ6K ? 32.0f : 4.0f)));
    else
      v = _mm256_sub_ps(_mm256_mul_ps(dl, widen8(q, h)), _mm256_set1_ps(s.dm * static_cast<float>(s.min[j])));
    _mm256_storeu_ps(out + 32 * G + 8 * h, v);
  }
  if constexpr (G < 7) dequantize_groups<F, G + 1>(b, s, out);
}

template <WeightFormat F>
void dequantize(const uint8_t* blocks, int64_t n, float* out) {
  for (int64_t k = 0; k < n / kSuperBlock; ++k) {
    const uint8_t* b = blocks + k * block_bytes<F>();
    SuperBlockScales s;
    kquant_unpack_scales(F, b, s);
    dequantize_groups<F, 0>(b, s, out + k * kSuperBlock);
  }
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

void kquant_dequantize_avx2(WeightFormat f, const uint8_t* blocks, int64_t n, float* out) {
  switch (f) {
    case WeightFormat::kQ2K: return dequantize<WeightFormat::kQ2K>(blocks, n, out);
    case WeightFormat::kQ3K: return dequantize<WeightFormat::kQ3K>(blocks, n, out);
    case WeightFormat::kQ4K: return dequantize<WeightFormat::kQ4K>(blocks, n, out);
    case WeightFormat::kQ5K: return dequantize<WeightFormat::kQ5K>(blocks, n, out);
    case WeightFormat::kQ6K: return dequantize<WeightFormat::kQ6K>(blocks, n, out);
    default: return;
  }
}

}  // namespace colossal::kernels::cpu::detail
