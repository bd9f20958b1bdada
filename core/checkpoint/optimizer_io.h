#pragma once
// Optimizer state as named tensors, keyed by the model's parameter names, so it is independent
// of how parameters were grouped or in which process they live:
//   "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step"   (Adam, AdamW, FusedAdamW)
//   "<param>.momentum_buffer"                                   (SGD with momentum)
#include <torch/optim/optimizer.h>

#include "core/checkpoint/safetensors.h"

namespace colossal::checkpoint {

/// `params` names the tensors the optimizer holds (e.g. ModelWrapper::full_model_state()).
NamedTensors optimizer_state(const torch::optim::Optimizer& optimizer, const NamedTensors& params);
/// Restores what optimizer_state() produced; throws naming a parameter whose state is missing
/// or has another shape.
void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedTensors& params,
                          const CheckpointReader& reader);

}  // namespace colossal::checkpoint
