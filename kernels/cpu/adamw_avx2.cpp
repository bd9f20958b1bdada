// AVX2 + FMA AdamW, 8 floats at a time. Compiled with -mavx2 -mfma (see CMakeLists.txt) and
// only called after a run-time CPU check, so the binary still runs on CPUs without AVX2.
#include <immintrin.h>

#include "kernels/cpu/adamw.h"

namespace colossal::kernels::cpu::detail {
namespace {

struct Vec {
  __m256 decay, beta1, omb1, beta2, omb2, neg_step_size, sqrt_bc2, eps;
  explicit Vec(const AdamWCoefficients& c)
      : decay(_mm256_set1_ps(c.decay)),
        beta1(_mm256_set1_ps(c.beta1)),
        omb1(_mm256_set1_ps(c.one_minus_beta1)),
        beta2(_mm256_set1_ps(c.beta2)),
        omb2(_mm256_set1_ps(c.one_minus_beta2)),
        neg_step_size(_mm256_set1_ps(c.neg_step_size)),
        sqrt_bc2(_mm256_set1_ps(c.sqrt_bc2)),
        eps(_mm256_set1_ps(c.eps)) {}
};

// Exactly the scalar update's operations (see adamw_scalar.cpp), eight lanes at a time.
inline __m256 update(__m256 p, __m256& m, __m256& v, __m256 g, const Vec& c) {
  p = _mm256_mul_ps(p, c.decay);
  m = _mm256_fmadd_ps(g, c.omb1, _mm256_mul_ps(m, c.beta1));
  v = _mm256_add_ps(_mm256_mul_ps(v, c.beta2), _mm256_mul_ps(_mm256_mul_ps(c.omb2, g), g));
  __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(v), c.sqrt_bc2), c.eps);
  return _mm256_add_ps(p, _mm256_div_ps(_mm256_mul_ps(c.neg_step_size, m), denom));
}

inline __m256 load_bf16(const uint16_t* src) {
  __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
}

inline void store_bf16(uint16_t* dst, __m256 f) {
  __m256i bits = _mm256_castps_si256(f);
  __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  // NaN stays NaN (quiet): keep its top half with the quiet bit set.
  __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
  __m256i nan_bits = _mm256_or_si256(bits, _mm256_set1_epi32(0x400000));
  rounded = _mm256_blendv_epi8(rounded, nan_bits, is_nan);
  __m256i hi = _mm256_srli_epi32(rounded, 16);
  // Pack 8 x 32-bit to 8 x 16-bit: packus works per 128-bit lane, then fix the lane order.
  __m256i packed = _mm256_packus_epi32(hi, hi);
  packed = _mm256_permute4x64_epi64(packed, 0xd8);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(dst), _mm256_castsi256_si128(packed));
}

}  // namespace

void adamw_fp32_avx2(float* p, float* m, float* v, const float* g, int64_t n,
                     const AdamWCoefficients& c) {
  Vec vc(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 mm = _mm256_loadu_ps(m + i), vv = _mm256_loadu_ps(v + i);
    __m256 pp = update(_mm256_loadu_ps(p + i), mm, vv, _mm256_loadu_ps(g + i), vc);
    _mm256_storeu_ps(p + i, pp);
    _mm256_storeu_ps(m + i, mm);
    _mm256_storeu_ps(v + i, vv);
  }
  adamw_fp32_scalar(p + i, m + i, v + i, g + i, n - i, c);
}

void adamw_bf16_avx2(float* master, float* m, float* v, const uint16_t* g, uint16_t* w,
                     int64_t n, const AdamWCoefficients& c) {
  Vec vc(c);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 mm = _mm256_loadu_ps(m + i), vv = _mm256_loadu_ps(v + i);
    __m256 pp = update(_mm256_loadu_ps(master + i), mm, vv, load_bf16(g + i), vc);
    _mm256_storeu_ps(master + i, pp);
    _mm256_storeu_ps(m + i, mm);
    _mm256_storeu_ps(v + i, vv);
    store_bf16(w + i, pp);
  }
  adamw_bf16_scalar(master + i, m + i, v + i, g + i, w + i, n - i, c);
}

}  // namespace colossal::kernels::cpu::detail
