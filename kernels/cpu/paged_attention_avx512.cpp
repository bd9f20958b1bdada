// AVX-512 paged attention for head dims that are multiples of 16 up to 256 (blocks of up to 512
// tokens): paged_attention_simd.h's loop, 16 lanes wide.
#include <immintrin.h>

#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_simd.h"

namespace colossal::kernels::cpu::detail {
namespace {

struct Avx512 {
  using Reg = __m512;
  static constexpr int kLanes = 16;
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg load_bf16(const uint16_t* p) {
    const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  }
  static Reg load_i8(const int8_t* p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* p, Reg v) { _mm512_storeu_ps(p, v); }
  static Reg set1(float x) { return _mm512_set1_ps(x); }
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg mul(Reg a, Reg b) { return _mm512_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static float reduce_add(Reg v) { return _mm512_reduce_add_ps(v); }
};

constexpr int kMaxChunks = 16;  // head_dim / 16

template <CacheKind Kind>
void dispatch(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  switch (p.head_dim / 16) {
    case 1: return attend_rows<Avx512, Kind, 1>(p, begin, end);
    case 2: return attend_rows<Avx512, Kind, 2>(p, begin, end);
    case 3: return attend_rows<Avx512, Kind, 3>(p, begin, end);
    case 4: return attend_rows<Avx512, Kind, 4>(p, begin, end);
    case 5: return attend_rows<Avx512, Kind, 5>(p, begin, end);
    case 6: return attend_rows<Avx512, Kind, 6>(p, begin, end);
    case 7: return attend_rows<Avx512, Kind, 7>(p, begin, end);
    case 8: return attend_rows<Avx512, Kind, 8>(p, begin, end);
    case 10: return attend_rows<Avx512, Kind, 10>(p, begin, end);
    case 12: return attend_rows<Avx512, Kind, 12>(p, begin, end);
    default: return attend_rows<Avx512, Kind, kMaxChunks>(p, begin, end);
  }
}

}  // namespace

bool paged_attention_avx512_fits(int64_t head_dim, int64_t block_size) {
  static const bool has = __builtin_cpu_supports("avx512f");
  const int64_t c = head_dim / 16;
  return has && head_dim % 16 == 0 && (c <= 8 || c == 10 || c == 12 || c == kMaxChunks) &&
         block_size <= kMaxCachedBlock;
}

void paged_attention_avx512(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  if (p.k_scales && p.scale_group == 32) return dispatch<kQ8Group32Cache>(p, begin, end);
  if (p.k_scales) return dispatch<kQ8Cache>(p, begin, end);
  if (p.bf16_cache) return dispatch<kBf16Cache>(p, begin, end);
  dispatch<kF32Cache>(p, begin, end);
}

}  // namespace colossal::kernels::cpu::detail
