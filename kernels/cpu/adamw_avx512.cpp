// AVX-512 AdamW, sixteen floats at a time: the AVX2 file's operations, in the same order, on
// twice the width (the result is bit for bit the scalar one's). Compiled with -mavx512f and
// called only after a run-time CPU check. The update divides twice per element; on this width
// the divider, not memory, bounds the loop less often than on AVX2 (see bench_optim).
#include <immintrin.h>

#include "kernels/cpu/adamw.h"
#include "kernels/cpu/bf16_avx512.h"

namespace colossal::kernels::cpu::detail {
namespace {

struct Vec {
  __m512 decay, beta1, omb1, beta2, omb2, neg_step_size, sqrt_bc2, eps;
  explicit Vec(const AdamWCoefficients& c)
      : decay(_mm512_set1_ps(c.decay)),
        beta1(_mm512_set1_ps(c.beta1)),
        omb1(_mm512_set1_ps(c.one_minus_beta1)),
        beta2(_mm512_set1_ps(c.beta2)),
        omb2(_mm512_set1_ps(c.one_minus_beta2)),
        neg_step_size(_mm512_set1_ps(c.neg_step_size)),
        sqrt_bc2(_mm512_set1_ps(c.sqrt_bc2)),
        eps(_mm512_set1_ps(c.eps)) {}
};

inline __m512 update(__m512 p, __m512& m, __m512& v, __m512 g, const Vec& c) {
  p = _mm512_mul_ps(p, c.decay);
  m = _mm512_fmadd_ps(g, c.omb1, _mm512_mul_ps(m, c.beta1));
  v = _mm512_add_ps(_mm512_mul_ps(v, c.beta2), _mm512_mul_ps(_mm512_mul_ps(c.omb2, g), g));
  __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.sqrt_bc2), c.eps);
  return _mm512_add_ps(p, _mm512_div_ps(_mm512_mul_ps(c.neg_step_size, m), denom));
}

}  // namespace

void adamw_fp32_avx512(float* p, float* m, float* v, const float* g, int64_t n, const AdamWCoefficients& c) {
  Vec vc(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 mm = _mm512_loadu_ps(m + i), vv = _mm512_loadu_ps(v + i);
    __m512 pp = update(_mm512_loadu_ps(p + i), mm, vv, _mm512_loadu_ps(g + i), vc);
    _mm512_storeu_ps(p + i, pp);
    _mm512_storeu_ps(m + i, mm);
    _mm512_storeu_ps(v + i, vv);
  }
  adamw_fp32_scalar(p + i, m + i, v + i, g + i, n - i, c);
}

void adamw_bf16_avx512(float* master, float* m, float* v, const uint16_t* g, uint16_t* w, int64_t n,
                       const AdamWCoefficients& c) {
  Vec vc(c);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 mm = _mm512_loadu_ps(m + i), vv = _mm512_loadu_ps(v + i);
    __m512 pp = update(_mm512_loadu_ps(master + i), mm, vv, load_bf16x16(g + i), vc);
    _mm512_storeu_ps(master + i, pp);
    _mm512_storeu_ps(m + i, mm);
    _mm512_storeu_ps(v + i, vv);
    store_bf16x16(w + i, pp);
  }
  adamw_bf16_scalar(master + i, m + i, v + i, g + i, w + i, n - i, c);
}

}  // namespace colossal::kernels::cpu::detail
