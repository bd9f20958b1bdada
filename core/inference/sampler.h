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

/// The distribution sample() draws from for one position: the penalised, temperature-scaled
/// logits and the candidates that survive top-k, min-p and top-p with their probabilities.
/// Greedy (temperature 0) keeps one candidate, the first maximum.
struct TokenDistribution {
  std::vector<float> logits;   // penalised, then divided by the temperature (unless greedy)
  // Kept candidates: most likely first (ties by id) where top-k, top-p or min-p cut them; else the
  // whole vocabulary by id (no sort: sorting 100k+ logits per token would cost more than the draw).
  std::vector<int64_t> order;
  std::vector<double> prob;    // their weights, relative to `kept`
  double kept = 1;             // sum of prob
  bool greedy = false;         // temperature 0: no random number is drawn
  /// The probability of drawing `token` (0 outside the kept candidates).
  double probability(int64_t token) const;
  /// log softmax of `logits` at `token`: the figure a request's logprobs report.
  double log_softmax(int64_t token) const;
};

/// `logits` [vocab] fp32 for one sequence; `prompt` and `output` for the penalties.
TokenDistribution token_distribution(const at::Tensor& logits, const SamplingParams& params,
                                     const std::vector<int64_t>& prompt, const std::vector<int64_t>& output);
/// One draw (a greedy distribution uses no random number).
int64_t draw(const TokenDistribution& d, std::mt19937_64& rng);

/// token_distribution, then draw (logprob filled when params.logprobs).
Sampled sample(const at::Tensor& logits, const SamplingParams& params, const std::vector<int64_t>& prompt,
               const std::vector<int64_t>& output, std::mt19937_64& rng);

/// Speculative sampling's check of one drafted token (Leviathan et al., Chen et al.): `drafted`
/// was drawn from the draft model's distribution `q`; the target's is `p`. Returns `drafted` when
/// it is kept (with probability min(1, p/q)), otherwise a replacement drawn from the normalised
/// max(0, p - q); either way the result is distributed exactly as p. For greedy p it is p's
/// maximum, so greedy speculative decoding gives plain greedy decoding's tokens.
struct Verified {
  int64_t token = 0;
  bool accepted = false;
};
Verified verify_drafted(const TokenDistribution& p, const TokenDistribution& q, int64_t drafted, std::mt19937_64& rng);

}  // namespace colossal::inference
