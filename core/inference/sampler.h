#pragma once
// Choosing the next token from logits: penalties, then temperature, top-k, top-p and min-p
// filtering, then a draw from the request's own random stream (greedy when temperature is 0).
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace colossal::inference {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  int64_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off; keeps tokens with p >= min_p * p_max
  double repetition_penalty = 1.0;  // > 1 discourages tokens seen in prompt or output (CTRL style)
  double presence_penalty = 0.0;    // subtracted once from every generated token's logit
  double frequency_penalty = 0.0;   // subtracted per occurrence in the output
  std::optional<uint64_t> seed;     // per request; otherwise drawn from the engine's seed
  int64_t max_tokens = 16;
  std::vector<std::string> stop;    // stop strings (not included in the output)
  std::vector<int64_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;            // report log p of each chosen token

  /// Throws naming the field when a value is out of range.
  void validate() const;
};

struct Sampled {
  int64_t token = 0;
  double logprob = 0;  // log softmax of the (penalised, temperature-scaled) logits
};

/// `logits` [vocab] fp32 for one sequence; `prompt` and `output` for the penalties.
Sampled sample(const at::Tensor& logits, const SamplingParams& params, const std::vector<int64_t>& prompt,
               const std::vector<int64_t>& output, std::mt19937_64& rng);

}  // namespace colossal::inference
