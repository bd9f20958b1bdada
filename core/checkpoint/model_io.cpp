#include "core/checkpoint/model_io.h"


#include <sys/stat.h>
#include <torch/torch.h>

#include <map>
#include <set>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::checkpoint {
namespace {

std::string shape_and_dtype(at::IntArrayRef shape, c10::ScalarType dtype) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "] " + dtype_to_safetensors(dtype);
}

std::string join(const std::vector<std::string>& items, size_t limit = 20) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < limit; ++i) s += (i ? "; " : "") + items[i];
  if (items.size() > limit) s += "; ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

}  // namespace

std::string LoadReport::describe() const {
  std::string s;
  if (!missing.empty()) s += "missing in the checkpoint: " + join(missing) + ". ";
  if (!unexpected.empty()) s += "not in the model: " + join(unexpected) + ". ";
  if (!mismatched.empty()) s += "shape differs: " + join(mismatched) + ". ";
  if (!converted.empty()) s += "dtype converted: " + join(converted) + ". ";
  return s.empty() ? "exact match" : s;
}

NamedTensors model_state(const torch::nn::Module& model) {
  NamedTensors out;
  for (const auto& p : model.named_parameters(/*recurse=*/true)) out.emplace_back(p.key(), p.value());
  for (const auto& b : model.named_buffers(/*recurse=*/true)) out.emplace_back(b.key(), b.value());
  return out;
}

void SaveModelOptions::validate() const {
  COLOSSAL_CHECK(!shard || size_per_shard > 0, "[checkpoint] size_per_shard: expected > 0 bytes, got ",
                 size_per_shard);
}

std::vector<std::string> save_model_state(const NamedTensors& tensors, const std::string& dir,
                                          const SaveModelOptions& options) {
  options.validate();
  fs::make_dirs(dir);  // parents too (a missing parent was a confusing error)
  NamedTensors out;
  for (const auto& [name, t] : tensors) {
    auto v = t.detach();
    if (options.dtype && v.is_floating_point()) v = v.to(*options.dtype);
    out.emplace_back(name, v);
  }
  ShardOptions so;
  so.max_shard_bytes = options.shard ? options.size_per_shard : std::numeric_limits<int64_t>::max();
  return save_sharded(dir, out, so, {{"format", "pt"}});
}

LoadReport load_model_state(torch::nn::Module& model, const std::string& dir,
                            const LoadModelOptions& options) {
  return load_state_into(model_state(model), dir, options);
}

LoadReport load_state_into(const NamedTensors& targets, const std::string& dir,
                           const LoadModelOptions& options, const std::set<std::string>& held_elsewhere) {
  CheckpointReader reader(dir);
  if (options.adapt) options.adapt(reader);
  LoadReport report;
  auto names = reader.names();
  std::set<std::string> in_checkpoint(names.begin(), names.end());
  std::vector<std::pair<torch::Tensor, std::string>> plan;  // (target, checkpoint name)
  for (const auto& [name, target] : targets) {
    if (!in_checkpoint.erase(name)) {
      report.missing.push_back(name);
      continue;
    }
    const auto& info = reader.info(name);
    if (at::IntArrayRef(info.shape) != target.sizes()) {
      report.mismatched.push_back(name + ": checkpoint " + shape_and_dtype(info.shape, info.dtype) +
                                  ", model " + shape_and_dtype(target.sizes(), target.scalar_type()));
      continue;
    }
    if (info.dtype != target.scalar_type()) {
      bool both_float = c10::isFloatingType(info.dtype) && c10::isFloatingType(target.scalar_type());
      if (!both_float) {
        report.mismatched.push_back(name + ": checkpoint " + shape_and_dtype(info.shape, info.dtype) +
                                    ", model " + shape_and_dtype(target.sizes(), target.scalar_type()));
        continue;
      }
      report.converted.push_back(name + ": " + dtype_to_safetensors(info.dtype) + " -> " +
                                 dtype_to_safetensors(target.scalar_type()));
    }
    plan.emplace_back(target, name);
  }
  for (const auto& name : held_elsewhere) in_checkpoint.erase(name);
  report.unexpected.assign(in_checkpoint.begin(), in_checkpoint.end());
  COLOSSAL_CHECK(!options.strict || report.clean(), "[checkpoint] '", dir,
                 "' does not match the model (nothing was loaded): ", report.describe(),
                 "Load with strict = false to take what matches.");
  torch::NoGradGuard no_grad;
  for (auto& [target, name] : plan) target.copy_(reader.view(name));
  return report;
}

}  // namespace colossal::checkpoint
