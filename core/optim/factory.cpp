#include "core/optim/factory.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "core/common/check.h"
#include "core/optim/fused_adamw.h"
#include "core/optim/param_groups.h"

namespace colossal::optim {

void OptimizerOptions::validate() const {
  COLOSSAL_CHECK(name == "adamw" || name == "fused_adamw" || name == "adam" || name == "sgd",
                 "[optim] optimizer: expected adamw, fused_adamw, adam or sgd, got '", name, "'");
  COLOSSAL_CHECK(lr > 0, "[optim] lr: expected > 0, got ", lr);
  COLOSSAL_CHECK(weight_decay >= 0, "[optim] weight_decay: expected >= 0, got ", weight_decay);
  COLOSSAL_CHECK(beta1 >= 0 && beta1 < 1 && beta2 >= 0 && beta2 < 1,
                 "[optim] betas: expected in [0, 1), got ", beta1, " and ", beta2);
  COLOSSAL_CHECK(!nesterov || momentum > 0, "[optim] nesterov needs momentum > 0");
}

void OptimizerOptions::read(const ConfigNode& c) {
  c.read("name", name);
  c.read("lr", lr);
  c.read("weight_decay", weight_decay);
  c.read("beta1", beta1);
  c.read("beta2", beta2);
  c.read("eps", eps);
  c.read("momentum", momentum);
  c.read("nesterov", nesterov);
}

std::shared_ptr<torch::optim::Optimizer> make_optimizer(const torch::nn::Module& model,
                                                        const OptimizerOptions& o) {
  o.validate();
  if (o.name == "adamw" || o.name == "fused_adamw") {
    auto base = torch::optim::AdamWOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
        o.weight_decay);
    auto groups = weight_decay_groups(model, base);
    if (o.name == "adamw") return std::make_shared<torch::optim::AdamW>(std::move(groups), base);
    return std::make_shared<FusedAdamW>(std::move(groups), base);
  }
  if (o.name == "adam") {
    auto base = torch::optim::AdamOptions(o.lr).betas({o.beta1, o.beta2}).eps(o.eps).weight_decay(
        o.weight_decay);
    return std::make_shared<torch::optim::Adam>(weight_decay_groups(model, base), base);
  }
  auto base = torch::optim::SGDOptions(o.lr).momentum(o.momentum).nesterov(o.nesterov).weight_decay(
      o.weight_decay);
  return std::make_shared<torch::optim::SGD>(weight_decay_groups(model, base), base);
}

}  // namespace colossal::optim
