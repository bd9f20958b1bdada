#pragma once
// The vector paged-attention loop, written once for any vector width: the AVX-512 and AVX2 files
// each include it with their own Vec (register type, lane count, loads, arithmetic). The query
// and the running output stay in Vec variables, keys and values are read straight from the
// cache (bf16 widened, q8_0 widened and scaled); the online softmax is the portable kernel's,
// with the scale folded into the query. Internal linkage on purpose: each file compiles its own copy with its own
// instruction set.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/paged_attention.h"

namespace colossal::kernels::cpu::detail {
namespace {  // NOLINT(build/namespaces): see above

constexpr int kMaxCachedBlock = 512;  // tokens per cache block the loop handles

// How the cache stores its values.
// kQ8Group32Cache: q8_0 with a scale per 32 values (head dims that are multiples of 32), read a
// group at a time so each scale is applied once (the loop bounds known when compiled: a runtime
// group loop kept the accumulators out of registers and ran slower than scaling every load);
// kQ8Cache: any other group (one per row), each load scaled.
enum CacheKind { kF32Cache, kBf16Cache, kQ8Cache, kQ8Group32Cache };

// Lanes [L*c, L*c + L) of the cache row starting at value `row`, as fp32. A q8_0 row's scale
// group is a multiple of the lane count (paged_attention's dispatch checks), so each load meets
// one scale.
template <class Vec, CacheKind Kind>
inline typename Vec::Reg load_row(const PagedAttentionArgs& p, const void* base, const float* scales, int64_t row,
                                  int c) {
  constexpr int L = Vec::kLanes;
  if constexpr (Kind == kBf16Cache) {
    return Vec::load_bf16(static_cast<const uint16_t*>(base) + row + L * c);
  } else if constexpr (Kind == kQ8Cache || Kind == kQ8Group32Cache) {
    const float s = scales[row / p.scale_group + (L * c) / p.scale_group];
    return Vec::mul(Vec::load_i8(static_cast<const int8_t*>(base) + row + L * c), Vec::set1(s));
  } else {
    return Vec::load(static_cast<const float*>(base) + row + L * c);
  }
}

template <class Vec, CacheKind Kind, int Chunks>
void attend_rows(const PagedAttentionArgs& p, int64_t begin, int64_t end) {
  using Reg = typename Vec::Reg;
  constexpr int L = Vec::kLanes;
  const int64_t d = p.head_dim, group = p.heads / p.kv_heads;
  float scores[kMaxCachedBlock];
  for (int64_t item = begin; item < end; ++item) {
    const int64_t t = item / p.heads, h = item % p.heads, kvh = h / group;
    const float* qp = p.q + (t * p.heads + h) * d;
    Reg q[Chunks], acc[Chunks];
    const Reg scale = Vec::set1(p.scale);
    for (int c = 0; c < Chunks; ++c) {
      q[c] = Vec::mul(Vec::load(qp + L * c), scale);  // scores come out scaled
      acc[c] = Vec::zero();
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
        Reg s;
        if constexpr (Kind == kQ8Group32Cache && Chunks % (32 / L) == 0) {  // a group's products, scaled once
          constexpr int per = 32 / L;
          const auto* k = static_cast<const int8_t*>(p.k_cache) + row;
          const float* sc = p.k_scales + row / 32;
          s = Vec::zero();
          for (int c = 0; c < Chunks; c += per) {
            Reg g = Vec::mul(q[c], Vec::load_i8(k + L * c));
            for (int e = 1; e < per; ++e) g = Vec::fmadd(q[c + e], Vec::load_i8(k + L * (c + e)), g);
            s = Vec::fmadd(Vec::set1(sc[c / per]), g, s);
          }
        } else {
          s = Vec::mul(q[0], load_row<Vec, Kind>(p, p.k_cache, p.k_scales, row, 0));
          for (int c = 1; c < Chunks; ++c)
            s = Vec::fmadd(q[c], load_row<Vec, Kind>(p, p.k_cache, p.k_scales, row, c), s);
        }
        scores[j] = Vec::reduce_add(s);
        if (p.softcap > 0) scores[j] = p.softcap * std::tanh(scores[j] / p.softcap);
        block_max = std::max(block_max, scores[j]);
      }
      const float new_m = std::max(m, block_max);
      const float correction = std::exp(m - new_m);  // 0 on the first block (m = -inf)
      l *= correction;
      const Reg corr = Vec::set1(correction);
      for (int c = 0; c < Chunks; ++c) acc[c] = Vec::mul(acc[c], corr);
      for (int64_t j = j0; j < n; ++j) {
        const int64_t row = ((block * p.block_size + j) * p.kv_heads + kvh) * d;
        const float w = std::exp(scores[j] - new_m);
        l += w;
        if constexpr (Kind == kQ8Group32Cache && Chunks % (32 / L) == 0) {  // weight x group scale, once a group
          constexpr int per = 32 / L;
          const auto* v = static_cast<const int8_t*>(p.v_cache) + row;
          const float* sc = p.v_scales + row / 32;
          for (int c = 0; c < Chunks; c += per) {
            const Reg wv = Vec::set1(w * sc[c / per]);
            for (int e = 0; e < per; ++e) acc[c + e] = Vec::fmadd(wv, Vec::load_i8(v + L * (c + e)), acc[c + e]);
          }
        } else {
          const Reg wv = Vec::set1(w);
          for (int c = 0; c < Chunks; ++c)
            acc[c] = Vec::fmadd(wv, load_row<Vec, Kind>(p, p.v_cache, p.v_scales, row, c), acc[c]);
        }
      }
      m = new_m;
    }
    float* out = p.out + (t * p.heads + h) * d;
    const Reg inv = Vec::set1(l > 0 ? 1.0f / l : 0.0f);
    for (int c = 0; c < Chunks; ++c) Vec::store(out + L * c, Vec::mul(acc[c], inv));
  }
}

}  // namespace
}  // namespace colossal::kernels::cpu::detail
