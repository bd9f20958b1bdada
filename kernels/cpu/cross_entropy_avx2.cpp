// AVX2 cross-entropy row for CPUs without AVX-512 (AMD Zen 2/3, older Xeons): the AVX-512 row's
// three passes, 8 lanes wide. Compiled with -mavx2 -mfma; called only after a run-time CPU check.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/adamw.h"  // bf16_to_float, float_to_bf16 for the tails
#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/cross_entropy.h"

namespace colossal::kernels::cpu::detail {
namespace {

// e^x for x <= 0 (inputs are x - max): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor
// series to r^7 (as the AVX-512 row), then 2^n built in the exponent field. Below -87 (where 2^n
// would leave the normal range) the result is 0: exp's value there is under 1.7e-38, nothing
// beside a row's largest term, which is 1.
inline __m256 exp_nonpositive(__m256 x) {
  const __m256 floor = _mm256_set1_ps(-87.0f);
  const __m256 underflow = _mm256_cmp_ps(x, floor, _CMP_LT_OQ);
  x = _mm256_max_ps(x, floor);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187045e-06f), r);
  __m256 p = _mm256_set1_ps(1.0f / 5040);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i biased = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));  // n >= -126
  const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(biased, 23));
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, two_n));
}

inline float reduce_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

}  // namespace

bool cross_entropy_avx2_supported() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

void cross_entropy_row_avx2(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss) {
  const int64_t body = v / 8 * 8;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (int64_t j = 0; j < body; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + j));
  float m = reduce_max(vmax);
  for (int64_t j = body; j < v; ++j) m = std::max(m, x[j]);
  const float picked = x[target];
  const __m256 vm = _mm256_set1_ps(m);
  // Four accumulators: the adds of one row do not wait on each other.
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t j = 0;
  for (; j + 32 <= body; j += 32) {
    __m256 e0 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
    __m256 e1 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j + 8), vm));
    __m256 e2 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j + 16), vm));
    __m256 e3 = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j + 24), vm));
    s0 = _mm256_add_ps(s0, e0), s1 = _mm256_add_ps(s1, e1), s2 = _mm256_add_ps(s2, e2), s3 = _mm256_add_ps(s3, e3);
    if (grad) {
      _mm256_storeu_ps(x + j, e0), _mm256_storeu_ps(x + j + 8, e1);
      _mm256_storeu_ps(x + j + 16, e2), _mm256_storeu_ps(x + j + 24, e3);
    }
  }
  for (; j < body; j += 8) {
    __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(x + j), vm));
    s0 = _mm256_add_ps(s0, e);
    if (grad) _mm256_storeu_ps(x + j, e);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
  for (; j < v; ++j) {
    const float e = std::exp(x[j] - m);
    sum += e;
    if (grad) x[j] = e;
  }
  *loss = m + std::log(sum) - picked;
  if (!grad) return;
  const float k = scale / sum;
  const __m256 vk = _mm256_set1_ps(k);
  for (j = 0; j < body; j += 8) _mm256_storeu_ps(x + j, _mm256_mul_ps(_mm256_loadu_ps(x + j), vk));
  for (; j < v; ++j) x[j] *= k;
  x[target] -= scale;
}

void bf16_to_float_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + j));
    _mm256_storeu_ps(dst + j, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16)));
  }
  for (; j < n; ++j) dst[j] = bf16_to_float(src[j]);
}

// float_to_bf16's rule (nearest even in integers, a NaN kept quiet), 8 at a time.
void float_to_bf16_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 f = _mm256_loadu_ps(src + j);
    const __m256i bits = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
    __m256i rounded = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
    const __m256i is_nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    rounded = _mm256_blendv_epi8(rounded, _mm256_or_si256(bits, _mm256_set1_epi32(0x400000)), is_nan);
    const __m256i high = _mm256_srli_epi32(rounded, 16);  // 8 values of 16 bits in 32-bit lanes
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(high), _mm256_extracti128_si256(high, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + j), packed);
  }
  for (; j < n; ++j) dst[j] = float_to_bf16(src[j]);
}

}  // namespace colossal::kernels::cpu::detail
