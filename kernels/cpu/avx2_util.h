#pragma once
// Small AVX2 helpers shared by the files compiled with -mavx2 (include only there). Internal
// linkage: each file keeps its own copy, built with its own flags.
#include <immintrin.h>

namespace colossal::kernels::cpu::detail {
namespace {  // NOLINT(build/namespaces): see above

// The sum of 8 floats.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

}  // namespace
}  // namespace colossal::kernels::cpu::detail
