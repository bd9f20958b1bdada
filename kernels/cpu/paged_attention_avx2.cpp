// AVX2 paged attention (with FMA) for CPUs without AVX-512 and head dims that are multiples of 8
// up to 256: the AVX-512 kernel 8 lanes wide. The query and the running output are kept in
// vector variables (the compiler spills what 16 registers cannot hold to L1); keys and values are
// read (and bf16 widened) straight from the cache. Same online softmax as the portable kernel,
// with the scale folded into the query.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/paged_attention.h"

namespace colossal::kernels::cpu::detail {
namespace {

constexpr int kMaxChunks = 32;  // head_dim / 8
constexpr int kMaxBlock = 512;  // tokens per cache block

template <bool Bf16>
inline __m256 load8(const void* base, int64_t offset) {
  if constexpr (Bf16) {
    const auto* p = static_cast<const uint16_t*>(base) + offset;
    __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(raw), 16));
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(base) + offset);
  }
}

inline float reduce_add(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <bool Bf16, int Chunks>
void attend(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  float scores[kMaxBlock];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / p.heads, h = item % p.heads, kvh = h / group;
    const float* qp = p.q + (t * p.heads + h) * d;
    __m256 q[Chunks], acc[Chunks];
    const __m256 scale = _mm256_set1_ps(p.scale);
    for (int c = 0; c < Chunks; ++c) {
      q[c] = _mm256_mul_ps(_mm256_loadu_ps(qp + 8 * c), scale);  // scores come out scaled
      acc[c] = _mm256_setzero_ps();
    }
    const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;
    const int64_t context = p.token_context[t];
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    // A sliding window starts at context - window: earlier blocks are never read (they may be freed).
    const int64_t first = p.window > 0 ? std::max<int64_t>(0, context - p.window) : 0;
    for (int64_t start = first / p.block_size * p.block_size; start < context; start += p.block_size) {
      const int64_t block = table[start / p.block_size];
      const int64_t n = std::min(p.block_size, context - start);
      const int64_t j0 = std::max<int64_t>(0, first - start);
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = j0; j < n; ++j) {
        const int64_t row = ((block * p.block_size + j) * p.kv_heads + kvh) * d;
        __m256 s = _mm256_mul_ps(q[0], load8<Bf16>(p.k_cache, row));
        for (int c = 1; c < Chunks; ++c) s = _mm256_fmadd_ps(q[c], load8<Bf16>(p.k_cache, row + 8 * c), s);
        scores[j] = reduce_add(s);
        if (p.softcap > 0) scores[j] = p.softcap * std::tanh(scores[j] / p.softcap);
        block_max = std::max(block_max, scores[j]);
      }
      const float new_m = std::max(m, block_max);
      const float correction = std::exp(m - new_m);  // 0 on the first block (m = -inf)
      l *= correction;
      const __m256 corr = _mm256_set1_ps(correction);
      for (int c = 0; c < Chunks; ++c) acc[c] = _mm256_mul_ps(acc[c], corr);
      for (int64_t j = j0; j < n; ++j) {
        const int64_t row = ((block * p.block_size + j) * p.kv_heads + kvh) * d;
        const float score = scores[j];
        const float w = std::exp(score - new_m);
        l += w;
        const __m256 wv = _mm256_set1_ps(w);
        for (int c = 0; c < Chunks; ++c) acc[c] = _mm256_fmadd_ps(wv, load8<Bf16>(p.v_cache, row + 8 * c), acc[c]);
      }
      m = new_m;
    }
    float* out = p.out + (t * p.heads + h) * d;
    const __m256 inv = _mm256_set1_ps(l > 0 ? 1.0f / l : 0.0f);
    for (int c = 0; c < Chunks; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(acc[c], inv));
  }
}

template <bool Bf16>
void dispatch(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  switch (p.head_dim / 8) {
    case 2: return attend<Bf16, 2>(p, begin, end);
    case 4: return attend<Bf16, 4>(p, begin, end);
    case 5: return attend<Bf16, 5>(p, begin, end);
    case 6: return attend<Bf16, 6>(p, begin, end);
    case 8: return attend<Bf16, 8>(p, begin, end);
    case 10: return attend<Bf16, 10>(p, begin, end);
    case 12: return attend<Bf16, 12>(p, begin, end);
    case 16: return attend<Bf16, 16>(p, begin, end);
    case 20: return attend<Bf16, 20>(p, begin, end);
    case 24: return attend<Bf16, 24>(p, begin, end);
    default: return attend<Bf16, kMaxChunks>(p, begin, end);
  }
}

}  // namespace

// Head dims 16, 32, 40, 48, 64, 80, 96, 128, 160, 192 and 256 (the ones models use).
bool paged_attention_avx2_fits(int64_t head_dim, int64_t block_size) {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int64_t c = head_dim / 8;
  const bool listed = c == 2 || c == 4 || c == 5 || c == 6 || c == 8 || c == 10 || c == 12 || c == 16 || c == 20 ||
                      c == 24 || c == kMaxChunks;
  return has && head_dim % 8 == 0 && listed && block_size <= kMaxBlock;
}

void paged_attention_avx2(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  if (p.bf16_cache) return dispatch<true>(p, begin, end);
  dispatch<false>(p, begin, end);
}

}  // namespace colossal::kernels::cpu::detail
