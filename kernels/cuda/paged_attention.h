#pragma once
// Decode attention over a paged KV cache on the GPU (the CPU kernel's contract, cpu/paged_attention.h):
// each query token attends to the first `context` positions of its sequence, read through the
// sequence's block table, with an online softmax; the cache is never gathered.
//
// Layout: q, out [tokens, heads, head_dim]; cache [blocks, block_size, kv_heads, head_dim]; q,
// out and the cache share one storage type (fp32, bf16 or fp16), the math is fp32. Grouped-query
// attention: query head h reads kv head h / (heads / kv_heads), and one CUDA block serves up to 8
// query heads of one kv head, so each key and value is read once for the whole group. Inside a
// block, 4 warps take every 4th position (two positions' loads in flight per warp) and merge their
// partial softmaxes at the end. Long contexts are split (flash decoding): blocks of up to
// kSplitPositions positions each write a partial softmax to `workspace`, and a second launch
// merges them, so one sequence at batch 1 still spreads over the whole GPU.
// head_dim up to 256; any block size.
#include <cstdint>

#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

struct PagedAttentionArgs {
  const void* q = nullptr;
  void* out = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  DType dtype = DType::f32;
  int64_t heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  const int32_t* block_tables = nullptr;  // [sequences, max_blocks]
  int64_t max_blocks = 0;
  const int32_t* token_seq = nullptr;      // [tokens]: row of block_tables
  const int32_t* token_context = nullptr;  // [tokens]: visible positions (position + 1)
  float scale = 1.0f;
  int64_t tokens = 0;
  int64_t max_context = 0;     // the largest token_context (the host knows it): sets the splits
  float* workspace = nullptr;  // paged_attention_workspace(args) floats when that is > 0
};

/// Positions one split covers.
constexpr int64_t kSplitPositions = 512;
/// fp32 elements of workspace the call needs (0: no split, none needed).
int64_t paged_attention_workspace(const PagedAttentionArgs& args);
void paged_attention(const PagedAttentionArgs& args, Stream stream);

}  // namespace colossal::kernels::cuda
