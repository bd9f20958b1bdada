#pragma once
// Parameter groups with weight decay only where it belongs: matrices and embeddings decay;
// biases, norm weights and other 1-D parameters do not (the usual rule for transformers).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <string>
#include <vector>

namespace colossal::optim {

struct WeightDecaySplit {
  std::vector<torch::Tensor> decay;
  std::vector<torch::Tensor> no_decay;
  std::vector<std::string> no_decay_names;
};

/// Trainable parameters split by the rule: no decay when 1-D (bias, norm weight, scale), or the
/// name ends in "bias", or a name component contains "norm".
WeightDecaySplit split_weight_decay(const torch::nn::Module& model);

/// Two param groups for any torch optimizer whose options have weight_decay(): the decaying one
/// with `base`, the other with weight_decay 0.
///   torch::optim::AdamW opt(weight_decay_groups(*model, torch::optim::AdamWOptions(1e-3)));
template <typename OptimizerOptions>
std::vector<torch::optim::OptimizerParamGroup> weight_decay_groups(const torch::nn::Module& model,
                                                                   const OptimizerOptions& base) {
  auto split = split_weight_decay(model);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  auto no_decay = std::make_unique<OptimizerOptions>(base);
  no_decay->weight_decay(0);
  groups.emplace_back(split.decay, std::make_unique<OptimizerOptions>(base));
  groups.emplace_back(split.no_decay, std::move(no_decay));
  return groups;
}

}  // namespace colossal::optim
