#pragma once
// FusedAdamW: torch::optim::AdamW's update in one pass over memory per parameter, vectorised
// (kernels/cpu/adamw, AVX2 when available) and split across intra-op threads. Options and
// per-parameter state are torch's own (AdamWOptions, AdamWParamState), so state_dicts move
// between the two. amsgrad is not supported (an error says so).
#include <torch/optim/adamw.h>
#include <torch/optim/optimizer.h>

#include "core/common/config.h"

namespace colossal::optim {

class FusedAdamW : public torch::optim::Optimizer {
 public:
  explicit FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                      torch::optim::AdamWOptions defaults = {});
  explicit FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults = {});

  torch::Tensor step(LossClosure closure = nullptr) override;
};

/// One fused AdamW step on a single tensor pair, for optimizers that keep their own state
/// (mixed precision masters):
///   master fp32, exp_avg/exp_avg_sq fp32, grad fp32 or bf16, working: undefined (master is the
///   parameter) or a bf16 tensor rewritten from the updated master.
void fused_adamw_update(torch::Tensor& master, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                        const torch::Tensor& grad, torch::Tensor working,
                        const torch::optim::AdamWOptions& options, int64_t step);

}  // namespace colossal::optim
