#pragma once
// Completions sampled by the generation engine (core/inference) from the weights being trained,
// in the training process: reinforcement learning's rollouts without a second server or a copy
// of the model elsewhere. refresh() takes the model's current weights (after each optimizer step);
// each completion's random stream comes from its own seed, so a completion is the same whatever
// batch or rank samples it, and the same as sampling token by token from the model's own forward
// with that seed (tested).
//
// Where a process does not hold its model whole (tensor parallelism, ZeRO-3/Gemini), a
// `WholeWeights` source gives the gathered weights (a collective: every rank refreshes at the same
// step) and the engine samples from a plain copy it keeps; every rank of a replica then samples
// the same completions.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/model_io.h"
#include "core/inference/engine.h"
#include "llama/inference.h"
#include "llama/model.h"
#include "llama/tokenizer.h"

namespace colossal::llama {

struct Completion {
  std::vector<int64_t> tokens;  // sampled, ending with the EOS token when the model ended it
  std::string text;             // decoded, without the EOS
  bool ended = false;           // stopped by EOS (else by the token limit)
};

class RolloutEngine {
 public:
  /// The model's whole weights by parameter name, gathered (CheckpointLayout::full_model_state).
  using WholeWeights = std::function<checkpoint::NamedTensors()>;
  /// `model`: the model being trained. Without `whole`, its parameters are the weights (one
  /// process's whole model: data parallelism, ZeRO-1/2); with it (required under tensor
  /// parallelism), each refresh() copies what `whole` gives into a plain model of the same config.
  /// Pipeline and sequence parallelism are refused.
  RolloutEngine(LlamaForCausalLM model, std::shared_ptr<const text::Tokenizer> tokenizer, WholeWeights whole = {});
  /// Takes the model's current weights (fused and packed for generation, fp32; LoRA adapters kept
  /// beside the base, as multi-LoRA serving runs them). Collective where a WholeWeights source is.
  void refresh();
  /// One completion per (prompt, seed): at most `max_tokens` tokens at `temperature` (0: greedy),
  /// sampled in one continuous batch. `ignore_eos`: every completion runs to `max_tokens` (the same
  /// work whatever the model samples: benchmarks).
  std::vector<Completion> sample(const std::vector<std::vector<int64_t>>& prompts, const std::vector<uint64_t>& seeds,
                                 int64_t max_tokens, double temperature, bool ignore_eos = false);
  /// Totals over every refresh() and sample() call: seconds in the engine (taking the weights and
  /// sampling) and tokens generated.
  double seconds() const { return seconds_; }
  int64_t tokens() const { return tokens_; }
  int64_t eos_id() const { return eos_id_; }

 private:
  LlamaForCausalLM model_;
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  WholeWeights whole_;
  LlamaForCausalLM plain_{nullptr};  // with `whole_`: the copy the engine samples from
  std::shared_ptr<LlamaInference> inference_;
  int64_t adapter_ = 0;  // LoRA: the engine's adapter holding the model's
  int64_t eos_id_ = -1;
  double seconds_ = 0;
  int64_t tokens_ = 0;
};

}  // namespace colossal::llama
