#pragma once
// Optimizers by name, with weight decay kept off biases and norm weights (param_groups.h):
//   "adamw"        torch::optim::AdamW
//   "fused_adamw"  FusedAdamW (kernels/cpu; same results, several times faster on CPU)
//   "adam"         torch::optim::Adam (L2 weight decay, as torch)
//   "sgd"          torch::optim::SGD (momentum, nesterov)
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>

#include "core/common/config.h"

namespace colossal::optim {

struct OptimizerOptions {
  std::string name = "adamw";
  double lr = 1e-3;
  double weight_decay = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double momentum = 0.0;   // sgd
  bool nesterov = false;   // sgd (needs momentum > 0)

  void validate() const;
  void read(const ConfigNode& config);
};

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const torch::nn::Module& model,
                                                        const OptimizerOptions& options);

}  // namespace colossal::optim
