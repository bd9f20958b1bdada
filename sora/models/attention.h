#pragma once
// Multi-head attention blocks shared by the text encoder and STDiT: self-attention over the
// second-to-last axis of [N, L, D] and cross-attention from [N, L, D] to a context [N, M, E]
// with a mask of the context's real tokens; both through the fused scaled-dot-product kernel.
//
// Sequence parallelism (Ulysses): self-attention built with a sequence group of n ranks takes
// this rank's L/n rows of every sequence, trades them for H/n of the heads over all L rows (one
// all-to-all each for q, k and v), attends, and trades back, so no rank holds a whole
// sequence's activations outside the attention itself.
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>

#include <cstdint>

#include "core/dist/group.h"

namespace colossal::sora {

class SelfAttentionImpl : public torch::nn::Module {
 public:
  /// `sequence_group`: the ranks each sequence is split over (default: none, whole sequences).
  SelfAttentionImpl(int64_t dim, int64_t heads, dist::Group sequence_group = {});
  /// x [N, L, D] (under a sequence group: this rank's [N, L/n, D]); key_mask [N, L] bool
  /// (optional, whole sequences only): keys that may be attended to.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask = {});

 private:
  int64_t heads_;
  dist::Group sequence_group_;
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
