#include "apps/python/optimizer_bridge.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "core/common/check.h"

namespace colossal::python {
namespace {

double need(const ParamGroupSpec& g, const std::string& key, size_t index) {
  auto it = g.options.find(key);
  COLOSSAL_CHECK(it != g.options.end(), "[python] optimizer param group ", index, " has no '", key, "'");
  return it->second;
}

std::unique_ptr<torch::optim::OptimizerOptions> options_for(const std::string& kind, const ParamGroupSpec& g,
                                                            size_t i) {
  if (kind == "adamw" || kind == "adam") {
    const double lr = need(g, "lr", i), b1 = need(g, "beta1", i), b2 = need(g, "beta2", i), eps = need(g, "eps", i),
                 wd = need(g, "weight_decay", i);
    if (kind == "adamw")
      return std::make_unique<torch::optim::AdamWOptions>(
          torch::optim::AdamWOptions(lr).betas({b1, b2}).eps(eps).weight_decay(wd));
    return std::make_unique<torch::optim::AdamOptions>(torch::optim::AdamOptions(lr).betas({b1, b2}).eps(eps).weight_decay(wd));
  }
  if (kind == "sgd")
    return std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(need(g, "lr", i))
                                                          .momentum(need(g, "momentum", i))
                                                          .dampening(need(g, "dampening", i))
                                                          .weight_decay(need(g, "weight_decay", i))
                                                          .nesterov(need(g, "nesterov", i) != 0));
  COLOSSAL_FAIL("[python] optimizer '", kind, "' has no C++ counterpart here; expected AdamW, Adam or SGD");
}

}  // namespace

std::shared_ptr<torch::optim::Optimizer> make_bridged_optimizer(const std::string& kind,
                                                               const std::vector<ParamGroupSpec>& groups) {
  COLOSSAL_CHECK(!groups.empty(), "[python] the optimizer has no param groups");
  std::vector<torch::optim::OptimizerParamGroup> cxx;
  for (size_t i = 0; i < groups.size(); ++i) cxx.emplace_back(groups[i].params, options_for(kind, groups[i], i));
  // The defaults are group 0's (every group carries its own options anyway).
  auto defaults = options_for(kind, groups[0], 0);
  if (kind == "adamw")
    return std::make_shared<torch::optim::AdamW>(std::move(cxx), static_cast<torch::optim::AdamWOptions&>(*defaults));
  if (kind == "adam")
    return std::make_shared<torch::optim::Adam>(std::move(cxx), static_cast<torch::optim::AdamOptions&>(*defaults));
  return std::make_shared<torch::optim::SGD>(std::move(cxx), static_cast<torch::optim::SGDOptions&>(*defaults));
}

}  // namespace colossal::python
