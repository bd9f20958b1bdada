#include "core/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/common/check.h"

namespace colossal::optim {

void LRScheduler::Options::validate() const {
  COLOSSAL_CHECK(kind == "constant" || kind == "cosine" || kind == "linear",
                 "[lr_scheduler] kind: expected constant, cosine or linear, got '", kind, "'");
  COLOSSAL_CHECK(warmup_steps >= 0, "[lr_scheduler] warmup_steps: expected >= 0, got ",
                 warmup_steps);
  COLOSSAL_CHECK(kind == "constant" || total_steps > warmup_steps,
                 "[lr_scheduler] ", kind, " decay needs total_steps (", total_steps,
                 ") > warmup_steps (", warmup_steps, ")");
  COLOSSAL_CHECK(min_lr_ratio >= 0 && min_lr_ratio <= 1,
                 "[lr_scheduler] min_lr_ratio: expected in [0, 1], got ", min_lr_ratio);
}

void LRScheduler::Options::read(const ConfigNode& c) {
  c.read("kind", kind);
  c.read("warmup_steps", warmup_steps);
  c.read("total_steps", total_steps);
  c.read("min_lr_ratio", min_lr_ratio);
}

LRScheduler::LRScheduler(torch::optim::Optimizer& optimizer, Options options)
    : optimizer_(optimizer), options_(std::move(options)) {
  options_.validate();
  for (auto& g : optimizer_.param_groups()) base_lrs_.push_back(g.options().get_lr());
  apply();
}

double LRScheduler::factor(int64_t step) const {
  if (step < options_.warmup_steps) {
    return static_cast<double>(step + 1) / static_cast<double>(options_.warmup_steps);
  }
  if (options_.kind == "constant") return 1.0;
  double t = static_cast<double>(step - options_.warmup_steps) /
             static_cast<double>(options_.total_steps - options_.warmup_steps);
  t = std::clamp(t, 0.0, 1.0);
  double m = options_.min_lr_ratio;
  if (options_.kind == "cosine") return m + (1 - m) * 0.5 * (1 + std::cos(M_PI * t));
  return 1 - (1 - m) * t;
}

void LRScheduler::apply() {
  double f = factor(step_);
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size() && i < base_lrs_.size(); ++i) {
    groups[i].options().set_lr(base_lrs_[i] * f);
  }
}

void LRScheduler::step() {
  ++step_;
  apply();
}

void LRScheduler::set_step(int64_t step) {
  COLOSSAL_CHECK(step >= 0, "[lr_scheduler] set_step: expected >= 0, got ", step);
  step_ = step;
  apply();
}

double LRScheduler::lr(size_t group) const {
  const auto& groups = optimizer_.param_groups();
  COLOSSAL_CHECK(group < groups.size(), "[lr_scheduler] no param group ", group);
  return groups[group].options().get_lr();
}

}  // namespace colossal::optim
