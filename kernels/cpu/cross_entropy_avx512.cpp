// AVX-512 cross-entropy row: vector max, exp and scale passes over one row held in L2.
// Compiled with -mavx512f; called only after a run-time CPU check.
#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/adamw.h"  // bf16_to_float, float_to_bf16 for the tails
#include "kernels/cpu/bf16_avx512.h"
#include "kernels/cpu/cross_entropy.h"

namespace colossal::kernels::cpu::detail {
namespace {

// e^x for x <= 0 (inputs are x - max): x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor
// series to r^7 (truncation below 6e-9 relative, under fp32's 6e-8), then 2^n by scalef
// (which also flushes x below about -104 to 0 as exp does).
inline __m512 exp_nonpositive(__m512 x) {
  const __m512 log2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 ln2_hi = _mm512_set1_ps(0.693145751953125f);
  const __m512 ln2_lo = _mm512_set1_ps(1.428606765330187045e-06f);
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, log2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, ln2_hi, x);
  r = _mm512_fnmadd_ps(n, ln2_lo, r);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

}  // namespace

void cross_entropy_row_avx512(float* x, int64_t v, int64_t target, bool grad, float scale, float* loss) {
  const int64_t body = v / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (v - body)) - 1);
  const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
  __m512 vmax = neg_inf;
  for (int64_t j = 0; j < body; j += 16) vmax = _mm512_max_ps(vmax, _mm512_loadu_ps(x + j));
  if (tail) vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(neg_inf, tail, x + body));
  const float m = _mm512_reduce_max_ps(vmax);
  const float picked = x[target];
  const __m512 vm = _mm512_set1_ps(m);
  // Four accumulators: the adds of one row do not wait on each other.
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t j = 0;
  for (; j + 64 <= body; j += 64) {
    __m512 e0 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
    __m512 e1 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j + 16), vm));
    __m512 e2 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j + 32), vm));
    __m512 e3 = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j + 48), vm));
    s0 = _mm512_add_ps(s0, e0), s1 = _mm512_add_ps(s1, e1), s2 = _mm512_add_ps(s2, e2), s3 = _mm512_add_ps(s3, e3);
    if (grad) {
      _mm512_storeu_ps(x + j, e0), _mm512_storeu_ps(x + j + 16, e1);
      _mm512_storeu_ps(x + j + 32, e2), _mm512_storeu_ps(x + j + 48, e3);
    }
  }
  for (; j < body; j += 16) {
    __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_loadu_ps(x + j), vm));
    s0 = _mm512_add_ps(s0, e);
    if (grad) _mm512_storeu_ps(x + j, e);
  }
  if (tail) {
    __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, x + body), vm));
    s0 = _mm512_mask_add_ps(s0, tail, s0, e);  // lanes past the row add nothing
    if (grad) _mm512_mask_storeu_ps(x + body, tail, e);
  }
  const float sum = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  *loss = m + std::log(sum) - picked;
  if (!grad) return;
  const __m512 k = _mm512_set1_ps(scale / sum);
  for (j = 0; j < body; j += 16) _mm512_storeu_ps(x + j, _mm512_mul_ps(_mm512_loadu_ps(x + j), k));
  if (tail) _mm512_mask_storeu_ps(x + body, tail, _mm512_mul_ps(_mm512_mask_loadu_ps(_mm512_setzero_ps(), tail, x + body), k));
  x[target] -= scale;
}

void bf16_to_float_avx512(const uint16_t* src, float* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(dst + j, load_bf16x16(src + j));
  for (; j < n; ++j) dst[j] = bf16_to_float(src[j]);
}

void float_to_bf16_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) store_bf16x16(dst + j, _mm512_loadu_ps(src + j));
  for (; j < n; ++j) dst[j] = float_to_bf16(src[j]);
}

}  // namespace colossal::kernels::cpu::detail
