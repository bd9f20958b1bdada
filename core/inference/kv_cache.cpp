#include "core/inference/kv_cache.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>

#include "core/common/check.h"
#include "kernels/cpu/paged_attention.h"

namespace colossal::inference {

int64_t PagedKVCache::bytes_per_block(const CacheShape& s, int64_t block_size) {
  int64_t row = s.head_dim * static_cast<int64_t>(c10::elementSize(s.dtype));
  if (s.dtype == at::kChar) row += s.head_dim / scale_group(s.head_dim) * 4;  // the fp32 scales
  return 2 * s.layers * block_size * s.kv_heads * row;
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
                     (shape.dtype == at::kHalf && shape.device.is_cuda()) ||
                     (shape.dtype == at::kChar && shape.device.is_cpu()),
                 "[inference] KV cache dtype must be float32 or bfloat16 (int8, q8_0, on the CPU; float16 on a GPU), "
                 "got ", shape.dtype, " on ", shape.device);
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
    if (shape.dtype == at::kChar) {
      const int64_t groups = shape.head_dim / scale_group(shape.head_dim);
      for (auto* scales : {&k_scales_, &v_scales_})
        scales->push_back(at::zeros({blocks_.num_blocks(), options.block_size, shape.kv_heads, groups}, at::kFloat));
    }
  }
}

void PagedKVCache::write_rows(int64_t layer, const int64_t* slots, int64_t n, const float* k, const float* v,
                              int64_t stride) {
  const int64_t row = shape_.kv_heads * shape_.head_dim;
  const bool bf16 = shape_.dtype == at::kBFloat16, q8 = shape_.dtype == at::kChar;
  const int64_t group = scale_group(shape_.head_dim), groups = row / group;
  auto store = [&](at::Tensor& dst, at::Tensor* scales, const float* src) {
    for (int64_t i = 0; i < n; ++i) {
      const float* from = src + i * stride;
      if (q8) {
        int8_t* to = dst.data_ptr<int8_t>() + slots[i] * row;
        float* scale = scales->data_ptr<float>() + slots[i] * groups;
        for (int64_t g = 0; g < groups; ++g) {
          float amax = 0;
          for (int64_t j = g * group; j < (g + 1) * group; ++j) amax = std::max(amax, std::fabs(from[j]));
          const float d = amax / 127.0f, inv = d > 0 ? 1.0f / d : 0.0f;
          for (int64_t j = g * group; j < (g + 1) * group; ++j)
            to[j] = static_cast<int8_t>(std::clamp(std::nearbyint(from[j] * inv), -127.0f, 127.0f));
          scale[g] = d;
        }
      } else if (bf16) {
        auto* to = dst.data_ptr<at::BFloat16>() + slots[i] * row;
        for (int64_t j = 0; j < row; ++j) to[j] = at::BFloat16(from[j]);
      } else {
        std::copy(from, from + row, dst.data_ptr<float>() + slots[i] * row);
      }
    }
  };
  const auto l = static_cast<size_t>(layer);
  store(keys(layer), q8 ? &k_scales_[l] : nullptr, k);
  store(values(layer), q8 ? &v_scales_[l] : nullptr, v);
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
  if (cache.shape().dtype == at::kChar) {
    a.k_scales = cache.key_scales(layer).const_data_ptr<float>();
    a.v_scales = cache.value_scales(layer).const_data_ptr<float>();
    a.scale_group = PagedKVCache::scale_group(cache.shape().head_dim);
  }
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
