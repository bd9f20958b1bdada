#pragma once
// The index arithmetic the CUDA kernels divide their work by, as plain functions compiled for the
// device and for the host, so that CPU tests can check that every element, query head and cache
// position is covered exactly once (the kernels themselves run only on a GPU).
#include <cstdint>

#ifdef __CUDACC__
#define COLOSSAL_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define COLOSSAL_HOST_DEVICE inline
#endif

namespace colossal::kernels::cuda::index {

// ---- multi-tensor AdamW: fixed-size chunks of all tensors in one grid ----------------------------

/// Chunks of `size` elements.
COLOSSAL_HOST_DEVICE int64_t chunks_of(int64_t size, int64_t chunk) { return (size + chunk - 1) / chunk; }

/// Sets each entry's first_chunk (entries with a `size` and a `first_chunk`); returns the total.
template <typename Entry>
int64_t plan_chunks(Entry* table, int count, int64_t chunk) {
  int64_t total = 0;
  for (int i = 0; i < count; ++i) {
    table[i].first_chunk = total;
    total += chunks_of(table[i].size, chunk);
  }
  return total;
}

/// The entry whose chunks hold `chunk`: the last one whose first_chunk is <= chunk (an empty entry
/// shares its first_chunk with the next, so the search passes over it).
template <typename Entry>
COLOSSAL_HOST_DEVICE int entry_of_chunk(const Entry* table, int count, int64_t chunk) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (table[mid].first_chunk <= chunk) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// ---- paged attention: blocks of query heads, splits of positions ---------------------------------

/// Query heads one CUDA block serves: up to `per_block` heads of one kv head (grouped-query
/// attention: head h reads kv head h / (heads / kv_heads)).
struct HeadBlock {
  int64_t kv_head = 0, first_head = 0;
  int heads = 0;
};
COLOSSAL_HOST_DEVICE int64_t blocks_per_kv_head(int64_t heads, int64_t kv_heads, int per_block) {
  return (heads / kv_heads + per_block - 1) / per_block;
}
COLOSSAL_HOST_DEVICE HeadBlock head_block(int64_t block, int64_t heads, int64_t kv_heads, int per_block) {
  const int64_t group = heads / kv_heads, parts = blocks_per_kv_head(heads, kv_heads, per_block);
  HeadBlock b;
  b.kv_head = block / parts;
  b.first_head = b.kv_head * group + (block % parts) * per_block;
  const int64_t left = b.kv_head * group + group - b.first_head;
  b.heads = static_cast<int>(left < per_block ? left : per_block);
  return b;
}

/// Splits of `per_split` positions for the longest context (1: no split).
COLOSSAL_HOST_DEVICE int64_t splits_for(int64_t max_context, int64_t per_split) {
  return max_context > per_split ? (max_context + per_split - 1) / per_split : 1;
}
/// Positions [begin, end) of `context` that split `split` of `splits` covers.
struct Range {
  int begin = 0, end = 0;
};
COLOSSAL_HOST_DEVICE Range split_range(int split, int splits, int context, int64_t per_split) {
  if (splits == 1) return {0, context};
  const int begin = split * static_cast<int>(per_split);
  const int end = begin + static_cast<int>(per_split);
  return {begin, end < context ? end : context};
}

}  // namespace colossal::kernels::cuda::index
