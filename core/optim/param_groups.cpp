#include "core/optim/param_groups.h"

#include <algorithm>
#include <cctype>

namespace colossal::optim {
namespace {

bool is_no_decay(const std::string& name, const torch::Tensor& p) {
  if (p.dim() < 2) return true;
  if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) return true;
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lower.find("norm") != std::string::npos;
}

}  // namespace

WeightDecaySplit split_weight_decay(const torch::nn::Module& model) {
  WeightDecaySplit split;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    if (!item.value().requires_grad()) continue;
    if (is_no_decay(item.key(), item.value())) {
      split.no_decay.push_back(item.value());
      split.no_decay_names.push_back(item.key());
    } else {
      split.decay.push_back(item.value());
    }
  }
  return split;
}

}  // namespace colossal::optim
