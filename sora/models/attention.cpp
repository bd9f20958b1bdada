#include "sora/models/attention.h"

#include <torch/torch.h>

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

SelfAttentionImpl::SelfAttentionImpl(int64_t dim, int64_t heads) : heads_(heads) {
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor SelfAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  const auto parts = qkv_->forward(x).chunk(3, -1);
  std::optional<torch::Tensor> mask;
  if (key_mask.defined()) mask = key_mask.view({x.size(0), 1, 1, x.size(1)});
  const auto out = at::scaled_dot_product_attention(split_heads(parts[0], heads_), split_heads(parts[1], heads_),
                                                    split_heads(parts[2], heads_), mask);
  return proj_->forward(merge_heads(out));
}

CrossAttentionImpl::CrossAttentionImpl(int64_t dim, int64_t context_dim, int64_t heads) : heads_(heads) {
  q_ = register_module("q", torch::nn::Linear(dim, dim));
  kv_ = register_module("kv", torch::nn::Linear(context_dim, 2 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
}

torch::Tensor CrossAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& context,
                                          const torch::Tensor& context_mask) {
  const auto kv = kv_->forward(context).chunk(2, -1);
  const auto mask = context_mask.view({context.size(0), 1, 1, context.size(1)});
  const auto out = at::scaled_dot_product_attention(split_heads(q_->forward(x), heads_), split_heads(kv[0], heads_),
                                                    split_heads(kv[1], heads_), mask);
  return proj_->forward(merge_heads(out));
}

}  // namespace colossal::sora
