#include "core/posttrain/grpo_loss.h"

#include <torch/torch.h>

#include "core/common/check.h"

namespace colossal::posttrain {

void GrpoOptions::validate() const {
  COLOSSAL_CHECK(num_generations >= 2, "[grpo] num_generations must be >= 2 (a group needs something to compare "
                 "with), got ", num_generations);
  COLOSSAL_CHECK(max_completion_length >= 1, "[grpo] max_completion_length must be >= 1, got ", max_completion_length);
  COLOSSAL_CHECK(temperature > 0, "[grpo] temperature must be > 0 (sampling), got ", temperature);
  COLOSSAL_CHECK(epsilon >= 0 && epsilon < 1, "[grpo] epsilon must be in [0, 1), got ", epsilon);
  COLOSSAL_CHECK(epsilon_high >= 0, "[grpo] epsilon_high must be >= 0, got ", epsilon_high);
  COLOSSAL_CHECK(beta >= 0, "[grpo] beta must be >= 0, got ", beta);
  COLOSSAL_CHECK(loss_type == "dapo" || loss_type == "grpo", "[grpo] loss_type: expected dapo or grpo, got '",
                 loss_type, "'");
}

namespace {

torch::Tensor grouped(const torch::Tensor& rewards, int64_t group) {
  COLOSSAL_CHECK(rewards.dim() == 1 && group >= 1 && rewards.size(0) % group == 0, "[grpo] rewards ",
                 rewards.sizes(), " do not split into groups of ", group);
  return rewards.to(torch::kFloat64).view({-1, group});
}

}  // namespace

torch::Tensor group_advantages(const torch::Tensor& rewards, int64_t group, bool scale_rewards) {
  auto r = grouped(rewards, group);
  auto centred = r - r.mean(1, true);
  if (scale_rewards) centred = centred / (r.std(1, /*unbiased=*/true, true) + 1e-4);
  return centred.reshape({-1});
}

torch::Tensor groups_with_signal(const torch::Tensor& rewards, int64_t group) {
  auto r = grouped(rewards, group);
  auto varied = (r.amax(1, true) - r.amin(1, true)).gt(0);
  return varied.expand_as(r).reshape({-1});
}

GrpoLoss grpo_loss(const GrpoBatch& b, const GrpoOptions& o) {
  COLOSSAL_CHECK(b.logps.dim() == 2 && b.mask.sizes() == b.logps.sizes(), "[grpo] logps ", b.logps.sizes(),
                 " and mask ", b.mask.sizes(), " must both be [completions, tokens]");
  COLOSSAL_CHECK(b.advantages.dim() == 1 && b.advantages.size(0) == b.logps.size(0), "[grpo] advantages ",
                 b.advantages.sizes(), ": expected one per completion [", b.logps.size(0), "]");
  const auto dtype = b.logps.scalar_type();
  auto old = b.old_logps.defined() ? b.old_logps.to(dtype) : b.logps.detach();
  COLOSSAL_CHECK(old.sizes() == b.logps.sizes(), "[grpo] old_logps ", old.sizes(), " differ from logps ",
                 b.logps.sizes());
  auto mask = b.mask.to(dtype);
  auto adv = b.advantages.to(dtype).unsqueeze(1);
  auto ratio = torch::exp(b.logps - old);
  auto clipped = torch::clamp(ratio, 1 - o.epsilon, 1 + o.epsilon_high);
  auto per_token = -torch::min(ratio * adv, clipped * adv);
  GrpoLoss out;
  const double tokens = std::max(1.0, mask.sum().item<double>());
  if (o.beta > 0) {
    COLOSSAL_CHECK(b.ref_logps.defined() && b.ref_logps.sizes() == b.logps.sizes(), "[grpo] beta ", o.beta,
                   " needs the reference model's log-probabilities, one per token ", b.logps.sizes());
    auto d = b.ref_logps.to(dtype) - b.logps;
    auto kl = torch::exp(d) - d - 1;
    per_token = per_token + o.beta * kl;
    out.kl = (kl.detach() * mask).sum().item<double>() / tokens;
  }
  if (o.loss_type == "grpo") {
    out.loss = ((per_token * mask).sum(1) / mask.sum(1).clamp_min(1)).mean();
  } else {
    out.loss = (per_token * mask).sum() / (b.tokens > 0 ? b.tokens : tokens);
  }
  torch::NoGradGuard no_grad;
  auto r = ratio.detach();
  out.clipped_low = ((r < 1 - o.epsilon).logical_and(adv < 0).to(dtype) * mask).sum().item<double>() / tokens;
  out.clipped_high = ((r > 1 + o.epsilon_high).logical_and(adv > 0).to(dtype) * mask).sum().item<double>() / tokens;
  return out;
}

}  // namespace colossal::posttrain
