#pragma once
// Losses that learn from pairs of answers (a chosen and a rejected one to the same prompt), from
// the sequences' log-likelihoods: the model's (and a frozen reference model's) log-probabilities
// of each answer's tokens, summed over the answer.
//
//   sigmoid  DPO (Rafailov et al., 2023): -log sigmoid(beta * h), h = (pi_c - pi_r) - (ref_c - ref_r);
//            label_smoothing eps mixes in the flipped pair: -(1-eps) log s(beta h) - eps log s(-beta h)
//            (conservative DPO).
//   ipo      IPO (Azar et al., 2023): (h - 1 / (2 beta))^2 on per-token mean log-probabilities.
//   simpo    SimPO (Meng et al., 2024): no reference; -log sigmoid(beta (avg_c - avg_r) - gamma) on
//            per-token means, with label smoothing as above.
//   orpo     ORPO (Hong et al., 2024): no reference; the chosen answers' token-mean NLL minus
//            beta * log sigmoid(log odds(avg_c) - log odds(avg_r)), odds(p) = p / (1 - p).
// The names, defaults and reported rewards are TRL's (DPOTrainer, CPOTrainer for SimPO,
// ORPOTrainer), so a user's settings and curves carry over. Nothing here knows a model.
#include <torch/types.h>

#include <string>

#include "core/common/options.h"

namespace colossal::posttrain {

struct PreferenceLossOptions {
  std::string loss_type = "sigmoid";  // sigmoid | ipo | simpo | orpo
  double beta = 0.1;
  double label_smoothing = 0;  // sigmoid, simpo
  double simpo_gamma = 0.5;    // simpo: the reward margin asked for

  template <class V>
  void visit(V& v) {
    v("loss_type", loss_type, "preference loss: sigmoid (DPO) | ipo | simpo | orpo",
      one_of({"sigmoid", "ipo", "simpo", "orpo"}));
    v("beta", beta, "preference losses' temperature (DPO, IPO, SimPO; ORPO: the odds-ratio term's weight)", above(0));
    v("label_smoothing", label_smoothing, "sigmoid, simpo: the share of pairs assumed flipped (conservative DPO)",
      between(0, 0.5));
    v("simpo_gamma", simpo_gamma, "simpo: the reward margin the loss asks for", at_least(0));
  }
  void validate() const;
  /// sigmoid and ipo compare with a frozen reference model's log-likelihoods.
  bool needs_reference() const { return loss_type == "sigmoid" || loss_type == "ipo"; }
  /// ipo, simpo and orpo use per-token means instead of sums.
  bool per_token_mean() const { return loss_type != "sigmoid"; }
};

/// Per pair [B]: the answers' summed log-probabilities under the model being trained (with their
/// gradients), their token counts, and (needs_reference) the reference model's sums.
struct PairLogProbs {
  torch::Tensor chosen, rejected;
  torch::Tensor chosen_tokens, rejected_tokens;
  torch::Tensor reference_chosen, reference_rejected;
  // orpo: the chosen tokens its NLL term divides by (0: this batch's). Data-parallel replicas pass
  // the global batch's count over the number of replicas, so their mean is the global token mean.
  double nll_tokens = 0;
};

struct PreferenceLoss {
  torch::Tensor loss;                      // mean over the pairs (scalar)
  // [B], no gradient: TRL's rewards/chosen, rewards/rejected (beta x the summed log-ratio to the
  // reference; beta x the per-token mean log-probability for simpo and orpo)
  torch::Tensor chosen_rewards, rejected_rewards;
};

/// The loss and rewards for a batch of pairs, in the inputs' dtype. Throws naming a missing
/// reference, a shape that differs, or an answer with no token.
PreferenceLoss preference_loss(const PairLogProbs& pairs, const PreferenceLossOptions& options);

/// A reward model's pairwise loss (Ouyang et al., 2022): mean -log sigmoid(r_chosen - r_rejected).
torch::Tensor pairwise_reward_loss(const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores);

}  // namespace colossal::posttrain
