#pragma once
// LLaMA for the generation engine (core/inference): no autograd, weights in fp32 or bf16, the
// q/k/v projections fused into one matrix and gate/up into another at load time (one matrix
// product each instead of three and two), rotary embeddings by position, attention through the
// paged KV cache. Mixtral's experts each run once per step over the tokens routed to them.
//
// Tensor parallelism (a model loaded with a ParallelContext): each rank keeps its slices, i.e.
// its query heads and their key/value heads (one whole kv head when there are fewer than tp),
// its share of the MLP and of the vocabulary. Attention and MLP outputs and the embedding
// lookup are all-reduced, the logits all-gathered, so every rank returns the same logits and
// the engines on all ranks step in lockstep; the KV cache holds only the rank's kv heads.
#include <memory>
#include <string>

#include "core/inference/model.h"
#include "llama/config.h"
#include "llama/model.h"
#include "llama/tokenizer.h"

namespace colossal::llama {

class LlamaInference : public inference::CausalLM {
 public:
  struct Options {
    at::ScalarType dtype = at::kFloat;  // weights, activations and the KV cache (norms and logits in fp32)
  };
  /// Takes (fused, converted) copies of a trained model's weights.
  LlamaInference(LlamaForCausalLM& model, Options options);
  /// A Hugging Face directory (config.json + safetensors); under tensor parallelism each rank
  /// reads only its slices.
  static std::shared_ptr<LlamaInference> load(const std::string& dir, Options options,
                                              const parallel::ParallelContext& parallel = {});

  inference::CacheShape cache_shape() const override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  at::Tensor forward(const inference::ModelInput& input, inference::PagedKVCache& cache) override;
  const LlamaConfig& config() const { return config_; }

 private:
  struct Layer {
    at::Tensor input_norm, post_norm, qkv, qkv_bias, o, o_bias, gate_up, down;
    at::Tensor router;                                         // Mixtral: [experts, hidden]
    std::vector<at::Tensor> expert_gate_up, expert_down;       // per expert, w1 and w3 fused
  };
  at::Tensor all_reduced(at::Tensor x) const;
  at::Tensor mixture_of_experts(const at::Tensor& x, const Layer& layer, int64_t ffn) const;

  LlamaConfig config_;
  Options options_;
  parallel::ParallelContext parallel_;
  int64_t heads_ = 0, kv_heads_ = 0, vocab_start_ = 0;  // this rank's
  std::vector<Layer> layers_;
  parallel::expert::RouterOptions router_;  // Mixtral
  at::Tensor embed_, norm_, lm_head_, cos_, sin_;
};

/// The tokenizer as the engine's detokenizer. Ids past the tokenizer's vocabulary (a model whose
/// vocabulary is padded, e.g. to a multiple of 64 for tensor parallelism) have no text.
class TokenizerDetokenizer : public inference::Detokenizer {
 public:
  explicit TokenizerDetokenizer(std::shared_ptr<const Tokenizer> tok) : tok_(std::move(tok)) {}
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int64_t> known;
    known.reserve(ids.size());
    for (auto id : ids)
      if (id >= 0 && id < tok_->vocab_size()) known.push_back(id);
    return tok_->decode(known);
  }

 private:
  std::shared_ptr<const Tokenizer> tok_;
};

}  // namespace colossal::llama
