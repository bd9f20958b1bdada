#pragma once
// Dynamic loss scaling for fp16 training. The loss is multiplied by scale() before backward;
// gradients are divided by it before the step. When any rank finds an inf/nan gradient, every
// rank skips the step (the flag is all-reduced by the caller) and the scale backs off — after
// `hysteresis` consecutive overflows; after `growth_interval` overflow-free steps it grows.
#include <cstdint>
#include <map>
#include <string>

#include "core/common/config.h"

namespace colossal::amp {

class DynamicLossScaler {
 public:
  struct Options {
    double initial_scale = 65536.0;      // 2^16
    double growth_factor = 2.0;
    int64_t growth_interval = 1000;      // overflow-free steps before growing
    double backoff_factor = 0.5;
    int64_t hysteresis = 2;              // overflows tolerated before backing off
    double min_scale = 1.0;
    double max_scale = 4294967296.0;     // 2^32

    void validate() const;
    void read(const ConfigNode& config);
    /// fp16's options under the names ColossalAI's plugins take (see core/common/options.h).
    template <class V>
    void visit(V& v) {
      v("initial_scale", initial_scale, "fp16: starting loss scale");
      v("growth_factor", growth_factor, "fp16: scale multiplier after growth_interval good steps");
      v("growth_interval", growth_interval, "fp16: overflow-free steps before growing");
      v("backoff_factor", backoff_factor, "fp16: scale multiplier on overflow");
      v("hysteresis", hysteresis, "fp16: overflows tolerated before backing off");
      v("min_scale", min_scale, "fp16: smallest loss scale");
      v("max_scale", max_scale, "fp16: largest loss scale");
    }
  };

  DynamicLossScaler() : DynamicLossScaler(Options{}) {}
  explicit DynamicLossScaler(Options options);

  double scale() const { return scale_; }
  /// Records the outcome of one step (found_overflow must agree on every rank).
  /// Returns true when the optimizer step should run.
  bool update(bool found_overflow);

  /// For checkpoints: every field that changes during training.
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

  int64_t good_steps() const { return good_steps_; }
  int64_t hysteresis_left() const { return hysteresis_left_; }

 private:
  Options options_;
  double scale_;
  int64_t good_steps_ = 0;
  int64_t hysteresis_left_;
};

}  // namespace colossal::amp
