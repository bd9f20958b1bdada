#pragma once
// Group Relative Policy Optimization (Shao et al., 2024, DeepSeekMath) from sampled completions:
// each prompt's G completions are scored, each completion's advantage is its reward against its
// group's (no value model), and the policy is pushed toward the better ones through PPO's clipped
// objective per token. With DAPO's refinements (Yu et al., 2025): an asymmetric clip (a higher
// upper bound keeps rare tokens' probabilities free to rise), the loss averaged over tokens rather
// than sequences, and groups whose rewards are all equal dropped (they carry no signal).
//
//   advantage   A_i = r_i - mean(r_group), divided by (std(r_group) + 1e-4) with scale_rewards
//               (std unbiased, as TRL computes it)
//   ratio       rho_t = exp(logp_t - old_logp_t)  (1 in value when the completions were sampled
//               from the weights being trained; its gradient is logp's)
//   per token   -min(rho_t A, clip(rho_t, 1 - epsilon, 1 + epsilon_high) A) + beta KL_t,
//               KL_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1 (Schulman's k3 estimator)
//   dapo        sum over every completion token / the token count given (the whole step's)
//   grpo        mean over completions of each completion's token mean
// Names, defaults and reported metrics are TRL's GRPOTrainer's, but for epsilon_high (DAPO's 0.28).
// Nothing here knows a model.
#include <torch/types.h>

#include <string>

#include "core/common/options.h"

namespace colossal::posttrain {

struct GrpoOptions {
  int64_t num_generations = 8;        // G: completions per prompt
  int64_t max_completion_length = 32;
  double temperature = 1.0;           // sampling the completions
  double epsilon = 0.2;               // the clip's lower bound: 1 - epsilon
  double epsilon_high = 0.28;         // the clip's upper bound: 1 + epsilon_high
  double beta = 0.0;                  // KL to the reference model (0: none, no reference kept)
  std::string loss_type = "dapo";     // dapo | grpo
  bool scale_rewards = true;          // divide advantages by the group's standard deviation
  bool dynamic_sampling = true;       // drop groups whose completions all scored the same

  template <class V>
  void visit(V& v) {
    v("num_generations", num_generations, "grpo: completions sampled per prompt (G)", at_least(2));
    v("max_completion_length", max_completion_length, "grpo: tokens a completion may have", at_least(1));
    v("temperature", temperature, "grpo: sampling temperature of the completions", above(0));
    v("epsilon", epsilon, "grpo: the clip's lower bound, 1 - epsilon", between(0, 1));
    v("epsilon_high", epsilon_high, "grpo: the clip's upper bound, 1 + epsilon_high (DAPO's clip-higher)",
      at_least(0));
    v("grpo_beta", beta, "grpo: weight of the KL to the starting model (0: none)", at_least(0));
    v("grpo_loss_type", loss_type, "grpo: dapo (mean over all completion tokens) | grpo (mean of each "
      "completion's mean)", one_of({"dapo", "grpo"}));
    v("scale_rewards", scale_rewards, "grpo: divide advantages by the group's reward standard deviation");
    v("dynamic_sampling", dynamic_sampling, "grpo: drop groups whose completions all got the same reward");
  }
  void validate() const;
};

/// Advantages [N x G] (float64) for rewards [N x G] in groups of `group` consecutive completions.
torch::Tensor group_advantages(const torch::Tensor& rewards, int64_t group, bool scale_rewards);

/// [N x G] bool: the completions of groups whose rewards are not all equal.
torch::Tensor groups_with_signal(const torch::Tensor& rewards, int64_t group);

struct GrpoBatch {
  torch::Tensor logps;       // [S, T] per-token log-probabilities under the weights being trained
  torch::Tensor old_logps;   // [S, T] under the weights that sampled (undefined: logps, detached)
  torch::Tensor ref_logps;   // [S, T] under the reference model (beta > 0)
  torch::Tensor mask;        // [S, T] 1 on completion tokens
  torch::Tensor advantages;  // [S]
  double tokens = 0;         // dapo: the count the sum divides by (0: mask's sum)
};

struct GrpoLoss {
  torch::Tensor loss;
  // No gradient: the share of completion tokens clipped below (ratio < 1 - epsilon where A < 0)
  // and above (ratio > 1 + epsilon_high where A > 0), and the mean KL (0 without beta): TRL's
  // clip_ratio/low_mean, clip_ratio/high_mean and kl.
  double clipped_low = 0, clipped_high = 0, kl = 0;
};

/// The clipped objective for a batch of completions. Throws naming a shape that differs or a
/// missing reference.
GrpoLoss grpo_loss(const GrpoBatch& batch, const GrpoOptions& options);

}  // namespace colossal::posttrain
