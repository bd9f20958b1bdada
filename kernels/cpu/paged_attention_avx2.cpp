// AVX2 paged attention (with FMA) for CPUs without AVX-512 and head dims that are multiples of 8
// up to 256: paged_attention_simd.h's loop, 8 lanes wide (the compiler spills to L1 what 16
// registers cannot hold).
#include <immintrin.h>

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/paged_attention_simd.h"

namespace colossal::kernels::cpu::detail {
namespace {

struct Avx2 {
  using Reg = __m256;
  static constexpr int kLanes = 8;
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg load_bf16(const uint16_t* p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  }
  static Reg load_i8(const int8_t* p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  }
  static void store(float* p, Reg v) { _mm256_storeu_ps(p, v); }
  static Reg set1(float x) { return _mm256_set1_ps(x); }
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg mul(Reg a, Reg b) { return _mm256_mul_ps(a, b); }
  static Reg fmadd(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static float reduce_add(Reg v) { return hsum(v); }
};

constexpr int kMaxChunks = 32;  // head_dim / 8

template <CacheKind Kind>
void dispatch(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  switch (p.head_dim / 8) {
    case 2: return attend_rows<Avx2, Kind, 2>(p, begin, end);
    case 4: return attend_rows<Avx2, Kind, 4>(p, begin, end);
    case 5: return attend_rows<Avx2, Kind, 5>(p, begin, end);
    case 6: return attend_rows<Avx2, Kind, 6>(p, begin, end);
    case 8: return attend_rows<Avx2, Kind, 8>(p, begin, end);
    case 10: return attend_rows<Avx2, Kind, 10>(p, begin, end);
    case 12: return attend_rows<Avx2, Kind, 12>(p, begin, end);
    case 16: return attend_rows<Avx2, Kind, 16>(p, begin, end);
    case 20: return attend_rows<Avx2, Kind, 20>(p, begin, end);
    case 24: return attend_rows<Avx2, Kind, 24>(p, begin, end);
    default: return attend_rows<Avx2, Kind, kMaxChunks>(p, begin, end);
  }
}

}  // namespace

// Head dims 16, 32, 40, 48, 64, 80, 96, 128, 160, 192 and 256 (the ones models use).
bool paged_attention_avx2_fits(int64_t head_dim, int64_t block_size) {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int64_t c = head_dim / 8;
  const bool listed = c == 2 || c == 4 || c == 5 || c == 6 || c == 8 || c == 10 || c == 12 || c == 16 || c == 20 ||
                      c == 24 || c == kMaxChunks;
  return has && head_dim % 8 == 0 && listed && block_size <= kMaxCachedBlock;
}

void paged_attention_avx2(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  if (p.k_scales && p.scale_group == 32) return dispatch<kQ8Group32Cache>(p, begin, end);
  if (p.k_scales) return dispatch<kQ8Cache>(p, begin, end);
  if (p.bf16_cache) return dispatch<kBf16Cache>(p, begin, end);
  dispatch<kF32Cache>(p, begin, end);
}

}  // namespace colossal::kernels::cpu::detail
