#pragma once
// bf16 <-> fp32, sixteen at a time, for the files built with -mavx512f (only include there).
// Round to nearest even in integer arithmetic, a NaN kept quiet: detail::float_to_bf16's rule, so
// vector and scalar paths give the same bits (AVX512-BF16's conversion would flush denormals).
#include <immintrin.h>

#include <cstdint>

namespace colossal::kernels::cpu::detail {

inline __m512 load_bf16x16(const uint16_t* src) {
  __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
}

inline void store_bf16x16(uint16_t* dst, __m512 f) {
  __m512i bits = _mm512_castps_si512(f);
  __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(bits, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb));
  __mmask16 is_nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
  rounded = _mm512_mask_or_epi32(rounded, is_nan, bits, _mm512_set1_epi32(0x400000));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16)));
}

}  // namespace colossal::kernels::cpu::detail
