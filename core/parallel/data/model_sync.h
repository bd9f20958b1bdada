#pragma once
// Steps every data-parallel plugin takes when it wraps a model: start all ranks from rank 0's
// state, and learn when each parameter's gradient is complete in backward.
#include <torch/csrc/autograd/function.h>
#include <torch/nn/module.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/dist/group.h"

namespace colossal::parallel {

/// A lazily built model (nn::ParameterInitializer): every member takes group rank 0's
/// initialisation seed, so all materialise the same values. No-op for other models.
void broadcast_init_seed(torch::nn::Module& model, const dist::Group& group);

/// Broadcasts parameters (and buffers) from group rank 0, in place. Deferred parameters (lazy
/// construction) are skipped; the model's initialisation seed is broadcast instead. Parameters
/// named in `experts` (expert parallelism: other ranks of `group` hold other experts) are
/// broadcast over `expert_group` instead, the replicas holding the same experts.
void broadcast_model_state(torch::nn::Module& model, const dist::Group& group, bool buffers = true,
                           const std::set<std::string>& experts = {}, const dist::Group& expert_group = {});

/// Calls on_ready(i) after the gradient of params[i] has been accumulated in a backward (a post
/// hook on its gradient accumulator). The returned nodes must be kept alive (a parameter holds
/// its accumulator only weakly).
std::vector<std::shared_ptr<torch::autograd::Node>> add_gradient_ready_hooks(
    const std::vector<torch::Tensor>& params, const std::vector<std::string>& names,
    const std::string& plugin, std::function<void(size_t)> on_ready);

}  // namespace colossal::parallel
