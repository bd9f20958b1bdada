#include "core/parallel/expert/experts.h"

namespace colossal::parallel::expert {

std::set<std::string> expert_parameter_names(const torch::nn::Module& model) {
  std::set<std::string> out;
  for (const auto& item : model.named_modules()) {
    if (dynamic_cast<const ExpertsModule*>(item.value().get()) == nullptr) continue;
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters()) out.insert(prefix + p.key());
  }
  return out;
}

}  // namespace colossal::parallel::expert
