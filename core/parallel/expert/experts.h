#pragma once
// The module that holds a MoE layer's experts (this rank's share under expert parallelism). The
// plugins find expert parameters by it: under ep they live on some ranks only, so their
// gradients are reduced over the expert data-parallel group and saving gathers them over ep.
#include <torch/nn/module.h>

#include <set>
#include <string>

namespace colossal::parallel::expert {

class ExpertsModule : public torch::nn::Module {
 public:
  ExpertsModule() : torch::nn::Module("Experts") {}
};

/// Full names of every parameter under an ExpertsModule of `model`.
std::set<std::string> expert_parameter_names(const torch::nn::Module& model);

}  // namespace colossal::parallel::expert
