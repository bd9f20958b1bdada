#pragma once
// The C++ optimizer that runs in place of a Python one. The plugins need a torch::optim::Optimizer
// (ZeRO swaps its parameters for fp32 master slices, checkpoints read its state), so the Python
// optimizer gives its kind and its param groups' hyperparameters, and LibTorch's optimizer of the
// same kind — the same update rule — is built over the same tensors.
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace colossal::python {

struct ParamGroupSpec {
  std::vector<at::Tensor> params;
  std::map<std::string, double> options;  // lr, beta1, beta2, eps, weight_decay, momentum, dampening, nesterov
};

/// `kind`: "adamw", "adam" or "sgd". Errors name an unknown kind or a missing hyperparameter.
std::shared_ptr<torch::optim::Optimizer> make_bridged_optimizer(const std::string& kind,
                                                               const std::vector<ParamGroupSpec>& groups);

}  // namespace colossal::python
