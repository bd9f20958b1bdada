#include "core/inference/kv_cache.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>

#include "core/common/check.h"
#include "kernels/cpu/paged_attention.h"

namespace colossal::inference {

int64_t PagedKVCache::bytes_per_block(const CacheShape& s, int64_t block_size) {
  return 2 * s.layers * block_size * s.kv_heads * s.head_dim * static_cast<int64_t>(c10::elementSize(s.dtype));
}

void KVCacheOptions::validate() const {
  COLOSSAL_CHECK(block_size >= 1, "[inference] KV cache block_size: expected >= 1 token, got ", block_size);
  COLOSSAL_CHECK(memory_bytes >= 1, "[inference] KV cache memory: expected > 0 bytes, got ", memory_bytes);
  COLOSSAL_CHECK(num_blocks >= 0, "[inference] KV cache num_blocks: expected >= 0 (0: from the memory budget), got ",
                 num_blocks);
}

namespace {
int64_t pool_blocks(const CacheShape& shape, const KVCacheOptions& o) {
  o.validate();
  COLOSSAL_CHECK(shape.dtype == at::kFloat || shape.dtype == at::kBFloat16 ||
                     (shape.dtype == at::kHalf && shape.device.is_cuda()),
                 "[inference] KV cache dtype must be float32 or bfloat16 (or float16 on a GPU), got ", shape.dtype,
                 " on ", shape.device);
  if (o.num_blocks > 0) return o.num_blocks;
  int64_t per = PagedKVCache::bytes_per_block(shape, o.block_size);
  int64_t n = o.memory_bytes / per;
  COLOSSAL_CHECK(n >= 1, "[inference] KV cache budget of ", o.memory_bytes, " bytes holds no block of ",
                 o.block_size, " tokens (", per, " bytes each); raise the budget");
  return n;
}
}  // namespace

PagedKVCache::PagedKVCache(const CacheShape& shape, const KVCacheOptions& options)
    : shape_(shape), blocks_(pool_blocks(shape, options), options.block_size) {
  auto opts = at::TensorOptions().dtype(shape.dtype).device(shape.device);
  for (int64_t l = 0; l < shape.layers; ++l) {
    k_.push_back(at::zeros({blocks_.num_blocks(), options.block_size, shape.kv_heads, shape.head_dim}, opts));
    v_.push_back(at::zeros({blocks_.num_blocks(), options.block_size, shape.kv_heads, shape.head_dim}, opts));
  }
}

void PagedKVCache::write_rows(int64_t layer, const int64_t* slots, int64_t n, const float* k, const float* v,
                              int64_t stride) {
  const int64_t row = shape_.kv_heads * shape_.head_dim;
  const bool bf16 = shape_.dtype == at::kBFloat16;
  auto store = [&](at::Tensor& dst, const float* src) {
    for (int64_t i = 0; i < n; ++i) {
      const float* from = src + i * stride;
      if (bf16) {
        auto* to = dst.data_ptr<at::BFloat16>() + slots[i] * row;
        for (int64_t j = 0; j < row; ++j) to[j] = at::BFloat16(from[j]);
      } else {
        std::copy(from, from + row, dst.data_ptr<float>() + slots[i] * row);
      }
    }
  };
  store(keys(layer), k);
  store(values(layer), v);
}

namespace {
kernels::cpu::PagedAttentionArgs attention_args(const float* q, float* out, int64_t heads, int64_t tokens,
                                                const PagedKVCache& cache, int64_t layer,
                                                const AttentionMetadata& meta, double scale) {
  COLOSSAL_CHECK(meta.block_tables.is_contiguous() && meta.token_seq.is_contiguous() &&
                     meta.token_context.is_contiguous(), "[inference] attention metadata must be contiguous");
  kernels::cpu::PagedAttentionArgs a;
  a.q = q;
  a.out = out;
  a.k_cache = cache.keys(layer).const_data_ptr();
  a.v_cache = cache.values(layer).const_data_ptr();
  a.bf16_cache = cache.shape().dtype == at::kBFloat16;
  a.heads = heads;
  a.kv_heads = cache.shape().kv_heads;
  a.head_dim = cache.shape().head_dim;
  a.block_size = cache.blocks().block_size();
  a.block_tables = meta.block_tables.const_data_ptr<int32_t>();
  a.max_blocks = meta.block_tables.size(1);
  a.token_seq = meta.token_seq.const_data_ptr<int32_t>();
  a.token_context = meta.token_context.const_data_ptr<int32_t>();
  a.scale = static_cast<float>(scale);
  a.tokens = tokens;
  return a;
}
}  // namespace

void paged_attention_rows(const float* q, float* out, int64_t heads, const PagedKVCache& cache, int64_t layer,
                          const AttentionMetadata& meta, double scale, int64_t begin, int64_t end, int64_t window,
                          double softcap) {
  auto a = attention_args(q, out, heads, meta.token_seq.size(0), cache, layer, meta, scale);
  a.window = window;
  a.softcap = static_cast<float>(softcap);
  at::parallel_for(begin * heads, end * heads, 1, [&](int64_t b, int64_t e) { kernels::cpu::paged_attention(a, b, e); });
}

}  // namespace colossal::inference
