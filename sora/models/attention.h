#pragma once
// Multi-head attention blocks shared by the text encoder and STDiT: self-attention over the
// second-to-last axis of [N, L, D] and cross-attention from [N, L, D] to a context [N, M, E]
// with a mask of the context's real tokens; both through the fused scaled-dot-product kernel.
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

namespace colossal::sora {

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(int64_t dim, int64_t heads);
  /// x [N, L, D]; key_mask [N, L] bool (optional): keys that may be attended to.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask = {});

 private:
  int64_t heads_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(SelfAttention);

class CrossAttentionImpl : public torch::nn::Module {
 public:
  CrossAttentionImpl(int64_t dim, int64_t context_dim, int64_t heads);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& context, const torch::Tensor& context_mask);

 private:
  int64_t heads_;
  torch::nn::Linear q_{nullptr}, kv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(CrossAttention);

}  // namespace colossal::sora
