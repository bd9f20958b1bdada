#include "core/booster/loss_guard.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::booster {

namespace {
std::string describe(double v) { return std::isnan(v) ? "NaN" : std::isinf(v) ? "Inf" : c10::str(v); }
}  // namespace

bool LossGuard::check(double local_loss, double grad_norm, int64_t step, bool stop_asked) {
  const bool distributed = dist::is_initialized() && dist::world_size() > 1;
  const int world = distributed ? dist::world_size() : 1;
  const int me = distributed ? dist::rank() : 0;
  // One element per rank (non-finite there), and the count of ranks asked to stop.
  auto seen = torch::zeros({world + 1}, torch::kFloat32);
  seen[me] = std::isfinite(local_loss) && std::isfinite(grad_norm) ? 0.0f : 1.0f;
  seen[world] = stop_asked ? 1.0f : 0.0f;
  if (distributed) dist::all_reduce(seen, dist::world_group(), dist::ReduceOp::kSum);
  stop_requested_ = seen[world].item<float>() > 0;
  std::string ranks;
  auto flags = seen.accessor<float, 1>();
  for (int r = 0; r < world; ++r)
    if (flags[r] > 0) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (ranks.empty()) {
    consecutive_ = 0;
    return true;
  }
  ++consecutive_;
  if (options_.precision == "fp16" && consecutive_ <= options_.max_fp16_skips) return false;
  const std::string what = !std::isfinite(local_loss) ? "the loss is " + describe(local_loss)
                           : !std::isfinite(grad_norm) ? "the gradient norm is " + describe(grad_norm) + " (loss " +
                                                             describe(local_loss) + ")"
                                                       : std::string("the loss or the gradients are not finite");
  COLOSSAL_FAIL("[train] step ", step, ": ", what, world > 1 ? c10::str(" (seen on rank ", ranks, ")") : std::string(),
                options_.precision == "fp16" ? c10::str(" for ", consecutive_, " steps in a row") : std::string(),
                "; stopped before the optimizer step, so no NaN reaches the weights or a checkpoint. "
                "Try a lower learning rate, gradient clipping, or bf16",
                options_.advice.empty() ? "" : ". ", options_.advice);
}

double LossGuard::clip_and_check(Booster& booster, BoostedOptimizer& optimizer, double grad_clip, double local_loss,
                                 int64_t step, bool stop_asked) {
  const double norm =
      booster.clip_grad_norm(optimizer, grad_clip > 0 ? grad_clip : std::numeric_limits<double>::infinity());
  check(local_loss, norm, step, stop_asked);  // false only under fp16, whose scaler then skips the step itself
  return norm;
}

}  // namespace colossal::booster
