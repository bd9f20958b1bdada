#pragma once
// The fp32 side of a sharded optimizer, shared by the ZeRO plugins: each rank keeps fp32 master
// slices of the parameters it owns (1-D pieces of the flattened parameters) and steps the
// user's optimizer on them. This class turns the plugin's gradient shards into the masters'
// gradients (unscaled for fp16), agrees on overflow across ranks, clips by the global norm and
// runs the step.
//
// A slice's master may be a view of the working parameter itself (fp32 training without
// offload): the step then updates the working copy in place and nothing is copied.
#include <torch/optim/optimizer.h>

#include <optional>
#include <string>
#include <vector>

#include "core/amp/loss_scaler.h"
#include "core/checkpoint/optimizer_io.h"
#include "core/parallel/data/data_parallel_scope.h"
#include "core/dist/group.h"

namespace colossal::optim {
class FusedAdamW;
}

namespace colossal::zero {

struct MasterSlice {
  std::string name;            // the parameter's name in the model
  std::vector<int64_t> shape;  // the full parameter's shape
  int64_t offset = 0;          // first element of the flattened parameter this slice holds
  torch::Tensor master;        // fp32, 1-D, what the optimizer updates
  torch::Tensor grad;          // this rank's reduced gradient for the slice (any float dtype)
  torch::Tensor working;       // bf16 CPU view of the working copy of this slice, when the plugin
                               // lets a FusedAdamW rewrite it in its update pass (else undefined)
};

class MasterShards {
 public:
  MasterShards(dist::Group group, std::optional<amp::DynamicLossScaler> scaler)
      : group_(std::move(group)), scaler_(std::move(scaler)) {}

  std::vector<MasterSlice>& slices() { return slices_; }
  const std::vector<MasterSlice>& slices() const { return slices_; }

  /// Swaps the optimizer's parameters for the masters (`master_of` maps a working parameter to
  /// its slice index, or -1 when this rank owns none of it: the parameter is dropped).
  void bind(torch::optim::Optimizer& optimizer,
            const std::function<int64_t(const torch::Tensor&)>& slice_of);

  /// bf16 without loss scaling and a FusedAdamW: slices with a `working` view get the reduced
  /// bf16 gradient as it is, and the optimizer's one pass updates the master and rewrites the
  /// working view (bit for bit convert, update, copy; see core/amp/mixed_precision.h).
  void fuse_working_updates(torch::optim::Optimizer& optimizer);
  /// After step(): whether the update pass already wrote slice `i`'s working view.
  bool working_written(size_t i) const;

  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  amp::DynamicLossScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }
  const amp::DynamicLossScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }

  /// Gradients of slices whose optimizer step the plugin streams itself (NVMe offload): they
  /// join the overflow check and the global norm; the step multiplies them by
  /// streamed_grad_multiplier() (1 / loss scale, times the clipping coefficient).
  std::vector<torch::Tensor>& streamed_grads() { return streamed_grads_; }
  double streamed_grad_multiplier() const { return streamed_multiplier_; }

  /// After the gradients are reduced: master.grad = grad / loss_scale (a view when no
  /// conversion is needed), and (fp16) every rank agrees whether any gradient overflowed.
  void prepare_grads();
  /// Global norm over every rank's slices; scales the masters' gradients to max_norm. With a
  /// scope (hybrid parallelism) the norm also sums its norm group's tensor-parallel slices.
  double clip_grad_norm(double max_norm, double norm_type, const parallel::DataParallelScope* scope = nullptr);
  /// Steps the optimizer unless a rank overflowed; returns whether it ran.
  bool step(torch::optim::Optimizer& optimizer);
  int64_t skipped_steps() const { return skipped_steps_; }

  /// The slices as the checkpoint code names them (parameter, offset, tensor, full size).
  std::vector<checkpoint::OptimizerSlice> checkpoint_slices() const;
  /// The loss scaler's state (empty without one), and its restore.
  std::map<std::string, double> scaler_state() const;
  void load_scaler_state(const std::map<std::string, double>& state);

 private:
  dist::Group group_;
  std::optional<amp::DynamicLossScaler> scaler_;
  std::vector<MasterSlice> slices_;
  std::vector<torch::Tensor> streamed_grads_;
  double streamed_multiplier_ = 1.0;
  bool overflow_ = false;
  int64_t skipped_steps_ = 0;
  optim::FusedAdamW* fused_ = nullptr;
};

}  // namespace colossal::zero
