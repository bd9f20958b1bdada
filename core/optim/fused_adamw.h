#pragma once
// FusedAdamW: torch::optim::AdamW's update in one pass over memory per parameter, vectorised
// (kernels/cpu/adamw: AVX-512 or AVX2 when available). One step is one parallel region over all
// parameters together, split in equal element ranges across the intra-op threads (not one
// fork-join per tensor: a LLaMA has many small norm weights). Options and
// per-parameter state are torch's own (AdamWOptions, AdamWParamState), so state_dicts move
// between the two. amsgrad is not supported (an error says so). Parameters on CUDA devices are
// updated by kernels/cuda/adamw: one launch per device for all of them, the same bits as the CPU.
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include <map>

#include "core/common/config.h"

namespace colossal::optim {

class FusedAdamW : public torch::optim::Optimizer {
 public:
  explicit FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                      torch::optim::AdamWOptions defaults = {});
  explicit FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;

  /// Mixed precision: `master` (an fp32 parameter of this optimizer) has the bf16 copy `working`
  /// that the model computes with. While master's gradient is bf16 (the working gradient itself,
  /// handed over without a copy), step() updates the master from it and rewrites `working` from
  /// the updated master in the same pass: bit for bit the separate convert, update and copy.
  void set_working_copy(const torch::Tensor& master, torch::Tensor working);
  /// Whether the last step() rewrote `master`'s working copy (its gradient was bf16); otherwise
  /// the caller copies the master into it.
  bool wrote_working_copy(const torch::Tensor& master) const;

 private:
  struct WorkingCopy {
    torch::Tensor tensor;  // bf16, the master's size
    bool written = false;  // by the last step()
  };
  std::map<const void*, WorkingCopy> working_;  // keyed by the master's TensorImpl
};

/// One fused AdamW step on a single tensor pair, for optimizers that keep their own state
/// (mixed precision masters):
///   master fp32, exp_avg/exp_avg_sq fp32, grad fp32 or bf16, working: undefined (master is the
///   parameter) or a bf16 tensor rewritten from the updated master.
void fused_adamw_update(torch::Tensor& master, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                        const torch::Tensor& grad, torch::Tensor working,
                        const torch::optim::AdamWOptions& options, int64_t step);

}  // namespace colossal::optim
