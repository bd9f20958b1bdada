#pragma once
// Mixed-precision training state shared by plugins: low-precision working parameters in the
// model, fp32 master parameters in the optimizer, and (fp16) a dynamic loss scaler.
//
//   wrap():          casts the model's floating parameters/buffers to the compute dtype and, when
//                    that is a low precision, swaps the optimizer's parameters for fp32 masters;
//   loss_scale():    what Booster::backward multiplies the loss by;
//   prepare_grads(): after gradients are synchronised: copies them into the masters' grads
//                    (divided by the scale) and agrees with every rank of `group` on overflow —
//                    so clipping sees true fp32 gradients;
//   step(inner):     runs the inner optimizer unless any rank overflowed, updates the scaler,
//                    and writes the masters back into the working parameters. Returns whether
//                    the step ran.
// With bf16 and a FusedAdamW the masters' gradients are the bf16 working gradients themselves
// (no fp32 copy, no unscale: bf16 has no loss scale) and the optimizer writes the working copies
// in its update pass; the results are bit for bit those of the convert-update-copy sequence.
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <optional>
#include <vector>

#include "core/amp/loss_scaler.h"
#include "core/amp/precision.h"
#include "core/dist/group.h"

namespace colossal::optim {
class FusedAdamW;
}

namespace colossal::amp {

class MixedPrecision {
 public:
  MixedPrecision(Precision precision, const c10::Device& device,
                 DynamicLossScaler::Options scaler_options = {});

  void wrap(torch::nn::Module& model, torch::optim::Optimizer& optimizer);
  double loss_scale() const { return scaler_ ? scaler_->scale() : 1.0; }
  void prepare_grads(const dist::Group& group);
  bool step(torch::optim::Optimizer& optimizer);
  /// torch::nn::utils::clip_grad_norm_ over the optimizer's (master) parameters, aware of
  /// handed-over bf16 gradients; returns the total norm.
  double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type);
  /// master.grad *= coef, as on the fp32 gradient (a handed-over bf16 one is converted first).
  static void scale_master_grad(torch::Tensor& master, float coef);

  /// fp32 value of working parameter `p` (its master), or `p` itself when it has none.
  torch::Tensor master_of(const torch::Tensor& p) const;
  /// After the masters were overwritten (checkpoint load): the working copies follow them.
  void refresh_working_from_masters();

  Precision precision() const { return precision_; }
  c10::ScalarType compute_dtype() const { return compute_dtype_; }
  const DynamicLossScaler* scaler() const { return scaler_ ? &*scaler_ : nullptr; }
  DynamicLossScaler* scaler() { return scaler_ ? &*scaler_ : nullptr; }
  int64_t skipped_steps() const { return skipped_steps_; }

 private:
  Precision precision_;
  c10::ScalarType compute_dtype_;
  std::optional<DynamicLossScaler> scaler_;
  std::vector<torch::Tensor> working_;  // model parameters (compute dtype)
  std::vector<torch::Tensor> masters_;  // fp32 copy of working_[i] (undefined when no master)
  std::map<const void*, size_t> index_of_;  // working parameter -> its position
  bool has_masters_ = false;
  bool overflow_ = false;
  optim::FusedAdamW* fused_ = nullptr;  // set when it updates masters and working copies in one pass
  int64_t skipped_steps_ = 0;
};

}  // namespace colossal::amp
