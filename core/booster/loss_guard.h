#pragma once
// Stops a run whose loss or gradients went NaN or Inf before the optimizer turns them into NaN
// weights (and the next save into a NaN checkpoint). Every rank calls check() once per step with
// its local loss and the gradient norm; the ranks agree (one small all-reduce over the world) so
// all stop together, and the message names the ranks that saw it. The loss alone is not enough:
// a learning rate far too high gives finite losses with NaN gradients.
//
// Under fp16 the loss scaler already skips a step whose gradients overflowed, so a non-finite
// loss is tolerated there for a few consecutive steps (the scale drops meanwhile); past that the
// run is diverging and stops too.
#include <cstdint>
#include <string>

#include "core/booster/booster.h"

namespace colossal::booster {

struct LossGuardOptions {
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  int max_fp16_skips = 8;          // consecutive non-finite losses tolerated under fp16
  std::string advice;              // appended to the message (e.g. where the last checkpoint is)
};

class LossGuard {
 public:
  explicit LossGuard(LossGuardOptions options) : options_(std::move(options)) {}
  /// True when every rank's loss and gradient norm are finite; false when one is not and fp16
  /// tolerates it (the caller lets the scaler skip the step). Throws when the run must stop.
  /// `stop_asked`: this rank was asked to stop (a signal); the same exchange tells every rank
  /// whether any was (stop_requested()), so a job stops after the same step everywhere at no
  /// extra communication.
  bool check(double local_loss, double grad_norm, int64_t step, bool stop_asked = false);
  /// The training loop's call after backward: the global gradient norm, clipped to `grad_clip`
  /// (0: measured, not clipped — NaN gradients can come with a finite loss), then check().
  /// Returns the norm.
  double clip_and_check(Booster& booster, BoostedOptimizer& optimizer, double grad_clip, double local_loss,
                        int64_t step, bool stop_asked = false);
  /// Whether some rank asked to stop at the last check.
  bool stop_requested() const { return stop_requested_; }

 private:
  LossGuardOptions options_;
  int consecutive_ = 0;
  bool stop_requested_ = false;
};

}  // namespace colossal::booster
