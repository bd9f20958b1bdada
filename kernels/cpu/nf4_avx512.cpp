// NF4 dequantization with AVX-512F: 16 elements per step, the level of each 4-bit code looked up
// with one vpermps over the 16-entry table, times its block's absmax (the same float product as
// the scalar code, so both give identical results).
#include <immintrin.h>

#include "kernels/cpu/nf4.h"

namespace colossal::kernels::cpu::detail {

bool nf4_avx512_supports() {
  static const bool ok = __builtin_cpu_supports("avx512f");
  return ok;
}

void nf4_dequantize_avx512(const uint8_t* codes, const float* absmax, int64_t begin, int64_t end, float* out) {
  const __m512 table = _mm512_loadu_ps(kNf4Values);
  // Each of 8 bytes becomes two lanes (element 2k: high nibble, 2k + 1: low nibble).
  const __m512i shifts = _mm512_set_epi32(0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4);
  const __m512i nibble = _mm512_set1_epi32(0x0F);
  const __m512i pairs = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
  for (int64_t i = begin; i < end; i += 16) {
    __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i / 2));
    __m512i lanes = _mm512_permutexvar_epi32(pairs, _mm512_cvtepu8_epi32(bytes));
    __m512i index = _mm512_and_si512(_mm512_srlv_epi32(lanes, shifts), nibble);
    __m512 v = _mm512_mul_ps(_mm512_permutexvar_ps(index, table), _mm512_set1_ps(absmax[(i - begin) / kNf4Block]));
    _mm512_storeu_ps(out + (i - begin), v);
  }
}

}  // namespace colossal::kernels::cpu::detail
