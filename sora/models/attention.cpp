#include "sora/models/attention.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/nn/module_hooks.h"
#include "core/parallel/sequence/sequence_ops.h"

namespace colossal::sora {
namespace {

// [N, L, D] -> [N, heads, L, D / heads]
torch::Tensor split_heads(const torch::Tensor& x, int64_t heads) {
  return x.view({x.size(0), x.size(1), heads, x.size(2) / heads}).transpose(1, 2);
}

torch::Tensor merge_heads(const torch::Tensor& x) {
  return x.transpose(1, 2).reshape({x.size(0), x.size(2), x.size(1) * x.size(3)});
}

}  // namespace

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t heads, dist::Group sequence_group)
    : heads_(heads), sequence_group_(std::move(sequence_group)) {
  if (sequence_group_.is_member())
    COLOSSAL_CHECK(heads % sequence_group_.size() == 0, "[sora] attention: ", heads,
                   " heads do not split over the ", sequence_group_.size(), " sequence-parallel ranks (",
                   sequence_group_.describe(), "); all_to_all gives each rank heads / sp of them");
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  if (sequence_group_.is_member() && sequence_group_.size() > 1) {
    COLOSSAL_CHECK(!key_mask.defined(), "[sora] attention: a key mask needs whole sequences, not sequence shards");
    // [N, L/n, 3D] -> q, k, v as [N, L/n, H, Dh] -> [N, L, H/n, Dh], attention, and back.
    const auto parts = nn::call(qkv_, x).view({x.size(0), x.size(1), 3, heads_, -1}).unbind(2);
    auto whole = [&](const torch::Tensor& t) {
      return parallel::sequence_to_heads(t, sequence_group_).transpose(1, 2);  // [N, H/n, L, Dh]
    };
    const auto out = at::scaled_dot_product_attention(whole(parts[0]), whole(parts[1]), whole(parts[2]));
    const auto local = parallel::heads_to_sequence(out.transpose(1, 2).contiguous(), sequence_group_);
    return nn::call(proj_, local.flatten(2));
  }
  const auto parts = nn::call(qkv_, x).chunk(3, -1);
  std::optional<torch::Tensor> mask;
  if (key_mask.defined()) mask = key_mask.view({x.size(0), 1, 1, x.size(1)});
  const auto out = at::scaled_dot_product_attention(split_heads(parts[0], heads_), split_heads(parts[1], heads_),
                                                    split_heads(parts[2], heads_), mask);
  return nn::call(proj_, merge_heads(out));
}

CrossAttentionImpl::CrossAttentionImpl(int64_t dim, int64_t context_dim, int64_t heads) : heads_(heads) {
  q_ = register_module("q", torch::nn::Linear(dim, dim));
  kv_ = register_module("kv", torch::nn::Linear(context_dim, 2 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                          const torch::Tensor& context_mask) {
  const auto kv = nn::call(kv_, context).chunk(2, -1);
  const auto mask = context_mask.view({context.size(0), 1, 1, context.size(1)});
  const auto out = at::scaled_dot_product_attention(split_heads(nn::call(q_, x), heads_), split_heads(kv[0], heads_),
                                                    split_heads(kv[1], heads_), mask);
  return nn::call(proj_, merge_heads(out));
}

}  // namespace colossal::sora
