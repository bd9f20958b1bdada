#include "core/parallel/tensor/checkpoint.h"

#include <torch/torch.h>

#include <set>
#include <sstream>

#include "core/common/check.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::parallel {
namespace {

std::string describe(at::IntArrayRef shape, c10::ScalarType dtype) {
  std::ostringstream s;
  s << shape << " " << checkpoint::dtype_to_safetensors(dtype);
  return s.str();
}

}  // namespace

checkpoint::NamedTensors full_model_state(const torch::nn::Module& model) {
  const auto specs = collect_shard_specs(model);
  auto state = checkpoint::model_state(model);
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : state) {
    auto it = specs.find(name);
    if (it != specs.end()) tensor = gather_full(tensor.detach(), it->second);
  }
  return state;
}

checkpoint::LoadReport load_model_slices(torch::nn::Module& model, const std::string& dir,
                                         const checkpoint::LoadModelOptions& options) {
  const auto specs = collect_shard_specs(model);
  checkpoint::CheckpointReader reader(dir);
  if (options.adapt) options.adapt(reader);
  checkpoint::LoadReport report;
  auto names = reader.names();
  std::set<std::string> in_checkpoint(names.begin(), names.end());
  struct Copy {
    torch::Tensor target;
    std::string name;
    const ShardSpec* spec;
  };
  std::vector<Copy> plan;
  for (const auto& [name, target] : checkpoint::model_state(model)) {
    if (!in_checkpoint.erase(name)) {
      report.missing.push_back(name);
      continue;
    }
    auto it = specs.find(name);
    const ShardSpec* spec = it != specs.end() && it->second.dim >= 0 ? &it->second : nullptr;
    const auto expected = full_shape(target, spec);
    const auto& info = reader.info(name);
    const bool floats = c10::isFloatingType(info.dtype) && c10::isFloatingType(target.scalar_type());
    if (at::IntArrayRef(info.shape) != at::IntArrayRef(expected) || (info.dtype != target.scalar_type() && !floats)) {
      report.mismatched.push_back(name + ": checkpoint " + describe(info.shape, info.dtype) + ", model (whole) " +
                                  describe(expected, target.scalar_type()));
      continue;
    }
    if (info.dtype != target.scalar_type())
      report.converted.push_back(name + ": " + checkpoint::dtype_to_safetensors(info.dtype) + " -> " +
                                 checkpoint::dtype_to_safetensors(target.scalar_type()));
    plan.push_back({target, name, spec});
  }
  report.unexpected.assign(in_checkpoint.begin(), in_checkpoint.end());
  COLOSSAL_CHECK(!options.strict || report.clean(), "[checkpoint] '", dir,
                 "' does not match the model (nothing was loaded): ", report.describe(),
                 "Load with strict = false to take what matches.");
  torch::NoGradGuard no_grad;
  for (auto& c : plan) {
    auto view = reader.view(c.name);  // the mapped file: narrowing it reads only the slice
    c.target.copy_(c.spec ? slice_of(view, *c.spec, c.target.size(c.spec->dim)) : view);
  }
  return report;
}

}  // namespace colossal::parallel
