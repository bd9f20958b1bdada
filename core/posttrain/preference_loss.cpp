#include "core/posttrain/preference_loss.h"

#include <torch/torch.h>

#include "core/common/check.h"

namespace colossal::posttrain {

void PreferenceLossOptions::validate() const {
  COLOSSAL_CHECK(loss_type == "sigmoid" || loss_type == "ipo" || loss_type == "simpo" || loss_type == "orpo",
                 "[posttrain] loss_type: expected sigmoid, ipo, simpo or orpo, got '", loss_type, "'");
  COLOSSAL_CHECK(beta > 0, "[posttrain] beta must be > 0, got ", beta);
  COLOSSAL_CHECK(label_smoothing >= 0 && label_smoothing <= 0.5, "[posttrain] label_smoothing must be in [0, 0.5], got ",
                 label_smoothing);
  COLOSSAL_CHECK(label_smoothing == 0 || loss_type == "sigmoid" || loss_type == "simpo",
                 "[posttrain] label_smoothing applies to the sigmoid and simpo losses, not ", loss_type);
  COLOSSAL_CHECK(simpo_gamma >= 0, "[posttrain] simpo_gamma must be >= 0, got ", simpo_gamma);
}

namespace {

// -(1 - eps) log sigmoid(z) - eps log sigmoid(-z)
torch::Tensor smoothed_logistic(const torch::Tensor& z, double eps) {
  auto loss = -torch::log_sigmoid(z);
  return eps == 0 ? loss : (1 - eps) * loss - eps * torch::log_sigmoid(-z);
}

}  // namespace

PreferenceLoss preference_loss(const PairLogProbs& p, const PreferenceLossOptions& o) {
  o.validate();
  COLOSSAL_CHECK(p.chosen.defined() && p.rejected.defined() && p.chosen.dim() == 1 &&
                     p.chosen.sizes() == p.rejected.sizes(),
                 "[posttrain] preference_loss: chosen and rejected log-probabilities must be [B] alike");
  const bool mean = o.per_token_mean();
  if (mean) {
    COLOSSAL_CHECK(p.chosen_tokens.defined() && p.rejected_tokens.defined() &&
                       p.chosen_tokens.sizes() == p.chosen.sizes() && p.rejected_tokens.sizes() == p.chosen.sizes(),
                   "[posttrain] preference_loss ", o.loss_type, ": per-pair token counts [B] are needed");
    COLOSSAL_CHECK(p.chosen_tokens.gt(0).all().item<bool>() && p.rejected_tokens.gt(0).all().item<bool>(),
                   "[posttrain] preference_loss: an answer with no token to score (empty, or cut off by the length)");
  }
  auto per_token = [&](const torch::Tensor& sum, const torch::Tensor& count) {
    return mean ? sum / count.to(sum.scalar_type()) : sum;
  };
  auto chosen = per_token(p.chosen, p.chosen_tokens), rejected = per_token(p.rejected, p.rejected_tokens);
  PreferenceLoss out;
  torch::Tensor losses;
  if (o.needs_reference()) {
    COLOSSAL_CHECK(p.reference_chosen.defined() && p.reference_rejected.defined() &&
                       p.reference_chosen.sizes() == p.chosen.sizes() &&
                       p.reference_rejected.sizes() == p.chosen.sizes(),
                   "[posttrain] preference_loss ", o.loss_type, ": the reference model's log-probabilities [B] are "
                   "needed");
    auto ref_chosen = per_token(p.reference_chosen.to(chosen.scalar_type()), p.chosen_tokens);
    auto ref_rejected = per_token(p.reference_rejected.to(chosen.scalar_type()), p.rejected_tokens);
    auto h = (chosen - rejected) - (ref_chosen - ref_rejected);
    losses = o.loss_type == "sigmoid" ? smoothed_logistic(o.beta * h, o.label_smoothing)
                                      : (h - 1 / (2 * o.beta)).pow(2);
    // TRL's rewards: beta times the sequences' log-ratios (summed, for ipo too).
    out.chosen_rewards = (o.beta * (p.chosen - p.reference_chosen.to(p.chosen.scalar_type()))).detach();
    out.rejected_rewards = (o.beta * (p.rejected - p.reference_rejected.to(p.chosen.scalar_type()))).detach();
  } else {
    if (o.loss_type == "simpo") {
      losses = smoothed_logistic(o.beta * (chosen - rejected) - o.simpo_gamma, o.label_smoothing);
    } else {  // orpo: log odds(p) = log p - log(1 - p), p the per-token mean probability
      auto log_odds = (chosen - rejected) - (torch::log1p(-torch::exp(chosen)) - torch::log1p(-torch::exp(rejected)));
      auto nll = p.nll_tokens > 0 ? -p.chosen.sum() / p.nll_tokens
                                  : -p.chosen.sum() / p.chosen_tokens.sum().to(chosen.scalar_type());
      losses = nll - o.beta * torch::log_sigmoid(log_odds);
    }
    out.chosen_rewards = (o.beta * chosen).detach();
    out.rejected_rewards = (o.beta * rejected).detach();
  }
  out.loss = losses.mean();
  return out;
}

torch::Tensor pairwise_reward_loss(const torch::Tensor& chosen_scores, const torch::Tensor& rejected_scores) {
  COLOSSAL_CHECK(chosen_scores.sizes() == rejected_scores.sizes(), "[posttrain] pairwise_reward_loss: chosen ",
                 chosen_scores.sizes(), " and rejected ", rejected_scores.sizes(), " scores differ in shape");
  return -torch::log_sigmoid(chosen_scores - rejected_scores).mean();
}

}  // namespace colossal::posttrain
