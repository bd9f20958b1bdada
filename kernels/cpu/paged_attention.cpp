#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace colossal::kernels::cpu {
namespace {

constexpr int kLanes = 16;

inline float bf16_to_float(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Loads a key/value row as fp32 (a copy only for bf16 and q8_0).
inline const float* row(const PagedAttentionArgs& p, const void* cache, const float* scales, int64_t index,
                        float* scratch) {
  const int64_t d = p.head_dim;
  if (scales) {
    const int8_t* src = static_cast<const int8_t*>(cache) + index * d;
    const float* s = scales + index * (d / p.scale_group);
    for (int64_t i = 0; i < d; ++i) scratch[i] = static_cast<float>(src[i]) * s[i / p.scale_group];
    return scratch;
  }
  if (!p.bf16_cache) return static_cast<const float*>(cache) + index * d;
  const uint16_t* src = static_cast<const uint16_t*>(cache) + index * d;
  for (int64_t i = 0; i < d; ++i) scratch[i] = bf16_to_float(src[i]);
  return scratch;
}

__attribute__((target_clones("avx2", "default"))) float dot(const float* a, const float* b, int64_t d) {
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0;
  for (; i < d; ++i) s += a[i] * b[i];
  for (float x : acc) s += x;
  return s;
}

// acc = acc * a + v * b
__attribute__((target_clones("avx2", "default"))) void scale_add(float* acc, float a, const float* v, float b,
                                                                 int64_t d) {
  for (int64_t i = 0; i < d; ++i) acc[i] = acc[i] * a + v[i] * b;
}

}  // namespace

void paged_attention(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  if (p.k_scales && (p.scale_group < 1 || p.head_dim % p.scale_group != 0))
    throw std::invalid_argument("paged_attention: a q8_0 cache's scale group of " + std::to_string(p.scale_group) +
                                " values does not divide the head dim " + std::to_string(p.head_dim));
  // A q8_0 row's vector loads each meet one scale: its group must be a whole number of lanes.
  const bool q8 = p.k_scales != nullptr;
  if (detail::paged_attention_avx512_fits(p.head_dim, p.block_size) && (!q8 || p.scale_group % 16 == 0))
    return detail::paged_attention_avx512(p, begin, end);
  if (detail::paged_attention_avx2_fits(p.head_dim, p.block_size) && (!q8 || p.scale_group % 8 == 0))
    return detail::paged_attention_avx2(p, begin, end);
  paged_attention_portable(p, begin, end);
}

void paged_attention_portable(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  std::vector<float> acc(static_cast<size_t>(d)), scratch(static_cast<size_t>(d)), scores(static_cast<size_t>(p.block_size));
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / p.heads, h = item % p.heads, kvh = h / group;
    const float* q = p.q + (t * p.heads + h) * d;
    const int32_t* table = p.block_tables + static_cast<int64_t>(p.token_seq[t]) * p.max_blocks;
    const int64_t context = p.token_context[t];
    float m = -std::numeric_limits<float>::infinity(), l = 0;
    std::fill(acc.begin(), acc.end(), 0.0f);
    // A sliding window starts at context - window: earlier blocks are never read (they may be freed).
    const int64_t first = p.window > 0 ? std::max<int64_t>(0, context - p.window) : 0;
    for (int64_t start = first / p.block_size * p.block_size; start < context; start += p.block_size) {
      const int64_t block = table[start / p.block_size];
      const int64_t n = std::min(p.block_size, context - start);
      const int64_t j0 = std::max<int64_t>(0, first - start);
      // Scores of this block's keys, then one rescale of the running state per block.
      float block_max = -std::numeric_limits<float>::infinity();
      for (int64_t j = j0; j < n; ++j) {
        int64_t index = (block * p.block_size + j) * p.kv_heads + kvh;
        scores[j] = dot(q, row(p, p.k_cache, p.k_scales, index, scratch.data()), d) * p.scale;
        if (p.softcap > 0) scores[j] = p.softcap * std::tanh(scores[j] / p.softcap);
        block_max = std::max(block_max, scores[j]);
      }
      const float new_m = std::max(m, block_max);
      const float correction = std::exp(m - new_m);  // 0 on the first block (m = -inf)
      l *= correction;
      for (int64_t i = 0; i < d; ++i) acc[i] *= correction;
      for (int64_t j = j0; j < n; ++j) {
        const float w = std::exp(scores[j] - new_m);
        l += w;
        int64_t index = (block * p.block_size + j) * p.kv_heads + kvh;
        scale_add(acc.data(), 1.0f, row(p, p.v_cache, p.v_scales, index, scratch.data()), w, d);
      }
      m = new_m;
    }
    float* out = p.out + (t * p.heads + h) * d;
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int64_t i = 0; i < d; ++i) out[i] = acc[i] * inv;
  }
}

}  // namespace colossal::kernels::cpu
