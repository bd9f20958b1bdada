#pragma once
// Learning-rate schedules applied to every param group of an optimizer, relative to each
// group's learning rate at construction:
//   constant                        factor 1
//   linear warm-up (warmup_steps)   factor (step + 1) / warmup_steps
//   then cosine  (kind "cosine")    min_ratio + (1 - min_ratio) * (1 + cos(pi * t)) / 2
//   or   linear  (kind "linear")    1 - (1 - min_ratio) * t
// where t = (step - warmup) / (total - warmup) goes 0 -> 1. Call step() after optimizer.step().
#include <torch/optim/optimizer.h>

#include <string>
#include <vector>

#include "core/common/config.h"

namespace colossal::optim {

class LRScheduler {
 public:
  struct Options {
    std::string kind = "constant";  // constant | cosine | linear
    int64_t warmup_steps = 0;
    int64_t total_steps = 0;        // required for cosine and linear
    double min_lr_ratio = 0.0;      // floor of the decay, as a fraction of the base lr

    void validate() const;
    void read(const ConfigNode& config);
  };

  LRScheduler(torch::optim::Optimizer& optimizer, Options options);

  /// Advances one step and sets the new learning rate on every group.
  void step();
  /// The multiplier at a given step (pure; for tests and plots).
  double factor(int64_t step) const;
  int64_t last_step() const { return step_; }
  /// Restores the position (checkpoints) and applies the corresponding rate.
  void set_step(int64_t step);
  double lr(size_t group = 0) const;

 private:
  void apply();

  torch::optim::Optimizer& optimizer_;
  Options options_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

}  // namespace colossal::optim
