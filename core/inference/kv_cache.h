#pragma once
// The paged KV cache's storage: per layer, keys and values as [blocks, block_size, kv_heads,
// head_dim] in the cache dtype, with the block pool (BlockManager) sized from a memory budget.
// An int8 cache is llama.cpp's q8_0 idea (`--kv_cache_dtype q8_0`): each row of a head's keys or
// values is stored as int8 with one fp32 scale per group of 32 (per row when the head dim is not a
// multiple of 32), 1.125 bytes a value, so the same memory holds 3.6x the tokens of fp32.
#include <ATen/core/Tensor.h>

#include <vector>

#include "core/inference/block_manager.h"

namespace colossal::inference {

struct CacheShape {
  int64_t layers = 0, kv_heads = 0, head_dim = 0;
  at::ScalarType dtype = at::kFloat;  // fp32, bf16 or int8 (q8_0, on the CPU); fp16 too on a GPU
  c10::Device device = c10::kCPU;     // where the blocks live: the model's device
};

struct KVCacheOptions {
  int64_t block_size = 16;           // tokens per block
  int64_t memory_bytes = 256 << 20;  // budget for keys and values of all layers
  int64_t num_blocks = 0;            // > 0: exactly this many (overrides memory_bytes)
  /// Throws naming the field: block_size >= 1, memory_bytes >= 1, num_blocks >= 0.
  void validate() const;
};

class PagedKVCache {
 public:
  PagedKVCache(const CacheShape& shape, const KVCacheOptions& options);

  /// Bytes one block takes over all layers (keys and values, and an int8 cache's scales).
  static int64_t bytes_per_block(const CacheShape& shape, int64_t block_size);
  /// Values per scale of an int8 (q8_0) cache's rows: 32, or the head dim when 32 does not divide it.
  static int64_t scale_group(int64_t head_dim) { return head_dim % 32 == 0 ? 32 : head_dim; }

  BlockManager& blocks() { return blocks_; }
  const BlockManager& blocks() const { return blocks_; }
  const CacheShape& shape() const { return shape_; }
  at::Tensor& keys(int64_t layer) { return k_[static_cast<size_t>(layer)]; }
  at::Tensor& values(int64_t layer) { return v_[static_cast<size_t>(layer)]; }
  const at::Tensor& keys(int64_t layer) const { return k_[static_cast<size_t>(layer)]; }
  const at::Tensor& values(int64_t layer) const { return v_[static_cast<size_t>(layer)]; }
  /// An int8 cache's scales, [blocks, block_size, kv_heads, head_dim / scale_group] fp32 (undefined otherwise).
  const at::Tensor& key_scales(int64_t layer) const { return k_scales_[static_cast<size_t>(layer)]; }
  const at::Tensor& value_scales(int64_t layer) const { return v_scales_[static_cast<size_t>(layer)]; }

  /// Writes n tokens' keys and values of `layer` into cache slots: token i's keys at k + i * stride
  /// ([kv_heads, head_dim] fp32), values at v + i * stride, into slots[i] (converted to the cache dtype;
  /// int8: each group scaled by its largest magnitude / 127 and rounded to nearest even).
  void write_rows(int64_t layer, const int64_t* slots, int64_t n, const float* k, const float* v, int64_t stride);

 private:
  CacheShape shape_;
  BlockManager blocks_;
  std::vector<at::Tensor> k_, v_;
  std::vector<at::Tensor> k_scales_, v_scales_;  // int8 caches only
};

/// Attention metadata of one model step: where each token's sequence keeps its blocks and how
/// many positions it may look at.
struct AttentionMetadata {
  at::Tensor block_tables;   // [sequences, max_blocks] int32
  at::Tensor token_seq;      // [tokens] int32: row of block_tables
  at::Tensor token_context;  // [tokens] int32: position + 1
  at::Tensor slots;          // [tokens] int64: where each token's k/v are written
};

/// out = softmax(q k^T * scale) v over each token's visible cache positions for the step's tokens
/// [begin, end) (kernels/cpu/paged_attention), q and out fp32 [tokens, heads, head_dim] (the
/// metadata's rows index the whole step; it must be contiguous), in parallel over tokens x heads.
/// `window` > 0: each token sees only the last `window` of its positions (a sliding window).
/// `softcap` > 0: scores become softcap x tanh(score / softcap) before the softmax (Gemma 2).
void paged_attention_rows(const float* q, float* out, int64_t heads, const PagedKVCache& cache, int64_t layer,
                          const AttentionMetadata& meta, double scale, int64_t begin, int64_t end,
                          int64_t window = 0, double softcap = 0);

}  // namespace colossal::inference
