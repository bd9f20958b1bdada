#pragma once
// Stops a run whose loss went NaN or Inf before the optimizer turns it into NaN weights and the
// next save overwrites good checkpoints with them. Every rank calls check() once per step with
// its local loss; the ranks agree (one small all-reduce over the world) so all stop together,
// and the message names the ranks that saw it.
//
// Under fp16 the loss scaler already skips a step whose gradients overflowed, so a non-finite
// loss is tolerated there for a few consecutive steps (the scale drops meanwhile); past that the
// run is diverging and stops too.
#include <cstdint>
#include <string>

namespace colossal::booster {

struct LossGuardOptions {
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  int max_fp16_skips = 8;          // consecutive non-finite losses tolerated under fp16
  std::string advice;              // appended to the message (e.g. where the last checkpoint is)
};

class LossGuard {
 public:
  explicit LossGuard(LossGuardOptions options) : options_(std::move(options)) {}
  /// True when every rank's loss is finite; false when a rank's is not and fp16 tolerates it
  /// (the caller lets the scaler skip the step). Throws when the run must stop.
  bool check(double local_loss, int64_t step);

 private:
  LossGuardOptions options_;
  int consecutive_ = 0;
};

}  // namespace colossal::booster
