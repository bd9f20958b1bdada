// AVX-512 paged attention for head dims that are multiples of 16 up to 256: the query and the
// running output stay in registers, keys and values are read (and bf16 widened) 16 lanes at a
// time straight from the cache (blocks of up to 512 tokens). Same online softmax as the portable
// kernel, with the scale folded into the query.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/paged_attention.h"

namespace colossal::kernels::cpu::detail {
namespace {

constexpr int kMaxChunks = 16;   // head_dim / 16
constexpr int kMaxBlock = 512;  // tokens per cache block

template <bool Bf16>
inline __m512 load16(const void* base, int64_t offset) {
  if constexpr (Bf16) {
    const auto* p = static_cast<const uint16_t*>(base) + offset;
    __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(raw), 16));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(base) + offset);
  }
}

template <bool Bf16, int Chunks>
void attend(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  float scores[kMaxBlock];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / p.heads, h = item % p.heads, kvh = h / group;
    const float* qp = p.q + (t * p.heads + h) * d;
    __m512 q[Chunks], acc[Chunks];
    const __m512 scale = _mm512_set1_ps(p.scale);
    for (int c = 0; c < Chunks; ++c) {
      q[c] = _mm512_mul_ps(_mm512_loadu_ps(qp + 16 * c), scale);  // scores come out scaled
      acc[c] = _mm512_setzero_ps();
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
        __m512 s = _mm512_mul_ps(q[0], load16<Bf16>(p.k_cache, row));
        for (int c = 1; c < Chunks; ++c) s = _mm512_fmadd_ps(q[c], load16<Bf16>(p.k_cache, row + 16 * c), s);
        scores[j] = _mm512_reduce_add_ps(s);
        if (p.softcap > 0) scores[j] = p.softcap * std::tanh(scores[j] / p.softcap);
        block_max = std::max(block_max, scores[j]);
      }
      const float new_m = std::max(m, block_max);
      const float correction = std::exp(m - new_m);  // 0 on the first block (m = -inf)
      l *= correction;
      const __m512 corr = _mm512_set1_ps(correction);
      for (int c = 0; c < Chunks; ++c) acc[c] = _mm512_mul_ps(acc[c], corr);
      for (int64_t j = j0; j < n; ++j) {
        const int64_t row = ((block * p.block_size + j) * p.kv_heads + kvh) * d;
        const float score = scores[j];
        const float w = std::exp(score - new_m);
        l += w;
        const __m512 wv = _mm512_set1_ps(w);
        for (int c = 0; c < Chunks; ++c) acc[c] = _mm512_fmadd_ps(wv, load16<Bf16>(p.v_cache, row + 16 * c), acc[c]);
      }
      m = new_m;
    }
    float* out = p.out + (t * p.heads + h) * d;
    const __m512 inv = _mm512_set1_ps(l > 0 ? 1.0f / l : 0.0f);
    for (int c = 0; c < Chunks; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_mul_ps(acc[c], inv));
  }
}

template <bool Bf16>
void dispatch(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  switch (p.head_dim / 16) {
    case 1: return attend<Bf16, 1>(p, begin, end);
    case 2: return attend<Bf16, 2>(p, begin, end);
    case 3: return attend<Bf16, 3>(p, begin, end);
    case 4: return attend<Bf16, 4>(p, begin, end);
    case 5: return attend<Bf16, 5>(p, begin, end);
    case 6: return attend<Bf16, 6>(p, begin, end);
    case 7: return attend<Bf16, 7>(p, begin, end);
    case 8: return attend<Bf16, 8>(p, begin, end);
    case 10: return attend<Bf16, 10>(p, begin, end);
    case 12: return attend<Bf16, 12>(p, begin, end);
    default: return attend<Bf16, kMaxChunks>(p, begin, end);
  }
}

}  // namespace

bool paged_attention_avx512_fits(int64_t head_dim, int64_t block_size) {
  static const bool has = __builtin_cpu_supports("avx512f");
  const int64_t c = head_dim / 16;
  return has && head_dim % 16 == 0 && (c <= 8 || c == 10 || c == 12 || c == kMaxChunks) && block_size <= kMaxBlock;
}

void paged_attention_avx512(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  if (p.bf16_cache) return dispatch<true>(p, begin, end);
  dispatch<false>(p, begin, end);
}

}  // namespace colossal::kernels::cpu::detail
