#pragma once
// Attention that reads keys and values straight from a paged KV cache (no LibTorch). Each query
// token of each head walks its sequence's block table over the first `context` positions with
// an online softmax (running max and sum), so nothing the size of the context is materialised
// and the cache is never gathered into a contiguous copy.
//
// Layout: q, out [tokens, heads, head_dim] fp32; cache [blocks, block_size, kv_heads, head_dim]
// in fp32, bf16 (raw bits) or int8 (q8_0: signed values with one fp32 scale per group of
// `scale_group` values of a row, scales [blocks, block_size, kv_heads, head_dim / scale_group]).
// Grouped-query attention: head h reads kv head h / (heads/kv_heads).
// Work is split by the caller: run(args, begin, end) handles work items [begin, end) of
// tokens x heads, so any thread pool can drive it.
#include <cstdint>

namespace colossal::kernels::cpu {

struct PagedAttentionArgs {
  const float* q = nullptr;
  float* out = nullptr;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  bool bf16_cache = false;
  const float* k_scales = nullptr;  // set: an int8 (q8_0) cache, these its scales
  const float* v_scales = nullptr;
  int64_t scale_group = 0;          // values per scale (a divisor of head_dim)
  int64_t heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  const int32_t* block_tables = nullptr;  // [sequences, max_blocks]
  int64_t max_blocks = 0;
  const int32_t* token_seq = nullptr;      // [tokens]: row of block_tables
  const int32_t* token_context = nullptr;  // [tokens]: keys visible (position + 1 for causal)
  int64_t window = 0;                      // > 0: only the last `window` of them (a sliding window)
  float scale = 1.0f;
  float softcap = 0.0f;                    // > 0: score = softcap * tanh(score / softcap) (Gemma 2)
  int64_t tokens = 0;
};

/// Work items [begin, end) of tokens x heads (item = token * heads + head).
/// AVX-512 where the CPU has it and the head dim is a multiple of 16 (to 256), else AVX2 (head dims
/// that are multiples of 8, to 256, as models use them), else portable code.
void paged_attention(const PagedAttentionArgs& args, int64_t begin, int64_t end);
/// The portable kernel (the reference the tests hold the AVX-512 one to).
void paged_attention_portable(const PagedAttentionArgs& args, int64_t begin, int64_t end);

namespace detail {
bool paged_attention_avx512_fits(int64_t head_dim, int64_t block_size);
void paged_attention_avx512(const PagedAttentionArgs& args, int64_t begin, int64_t end);
bool paged_attention_avx2_fits(int64_t head_dim, int64_t block_size);
void paged_attention_avx2(const PagedAttentionArgs& args, int64_t begin, int64_t end);
}  // namespace detail

}  // namespace colossal::kernels::cpu
