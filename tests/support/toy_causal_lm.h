#pragma once
// A toy causal language model for testing the inference engine without a model library: one
// attention head over token embeddings with position offsets, reading and writing the engine's
// paged KV cache (core/inference/kv_cache.h), then a linear head. Small and exact enough that full
// recomputation without a cache is the reference, token for token.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "core/inference/model.h"

namespace colossal::testing {

class ToyCausalLM : public inference::CausalLM {
 public:
  static constexpr int64_t kVocab = 61, kDim = 8, kMaxPositions = 256;

  explicit ToyCausalLM(uint64_t seed = 3) {
    torch::manual_seed(seed);
    // Wide weights: decisive logits, so greedy argmax has no near-ties to flip on rounding.
    q_ = torch::randn({kVocab, kDim});
    k_ = torch::randn({kVocab, kDim});
    v_ = torch::randn({kVocab, kDim}) * 2;
    position_ = torch::randn({kMaxPositions, kDim}) * 0.5;
    head_ = torch::randn({kDim, kVocab}) * 2;
  }

  inference::CacheShape cache_shape() const override { return {.layers = 1, .kv_heads = 1, .head_dim = kDim}; }
  int64_t vocab_size() const override { return kVocab; }
  int64_t max_positions() const override { return kMaxPositions; }

  at::Tensor forward(const inference::ModelInput& in, inference::PagedKVCache& cache) override {
    const auto pos = position_.index_select(0, in.positions);
    auto q = (q_.index_select(0, in.tokens) + pos).contiguous();
    auto k = (k_.index_select(0, in.tokens) + pos).contiguous();
    auto v = v_.index_select(0, in.tokens).contiguous();
    const int64_t n = in.tokens.size(0);
    auto slots = in.attention.slots.contiguous();
    cache.write_rows(0, slots.data_ptr<int64_t>(), n, k.data_ptr<float>(), v.data_ptr<float>(), kDim);
    auto out = torch::empty({n, 1, kDim});
    inference::paged_attention_rows(q.data_ptr<float>(), out.data_ptr<float>(), 1, cache, 0, in.attention,
                                    1.0 / std::sqrt(static_cast<double>(kDim)), 0, n);
    return out.view({n, kDim}).index_select(0, in.sample_index).matmul(head_);
  }

  /// The logits after each token of `ids`, recomputed whole (no cache): [len, vocab].
  at::Tensor full_logits(const std::vector<int64_t>& ids) const {
    auto t = torch::tensor(ids, torch::kInt64);
    const auto pos = position_.narrow(0, 0, t.size(0));
    auto q = q_.index_select(0, t) + pos, k = k_.index_select(0, t) + pos, v = v_.index_select(0, t);
    auto scores = q.matmul(k.t()) / std::sqrt(static_cast<double>(kDim));
    const auto future = torch::ones({t.size(0), t.size(0)}, torch::kBool).triu(1);
    scores.masked_fill_(future, -std::numeric_limits<float>::infinity());
    return torch::softmax(scores, 1).matmul(v).matmul(head_);
  }

  /// Greedy continuation by full recomputation: the reference.
  std::vector<int64_t> greedy(std::vector<int64_t> ids, int64_t n) const {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t next = full_logits(ids)[-1].argmax().item<int64_t>();
      ids.push_back(next);
      out.push_back(next);
    }
    return out;
  }

 private:
  torch::Tensor q_, k_, v_, position_, head_;
};

}  // namespace colossal::testing
