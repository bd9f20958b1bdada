#include "core/booster/checkpoint_layout.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/booster/full_gradients.h"
#include "core/checkpoint/model_io.h"
#include "core/common/check.h"
#include "core/parallel/pipeline/state_exchange.h"

namespace colossal::booster {

checkpoint::NamedTensors StateStore::model_state(const torch::nn::Module& model, bool trainable_only) const {
  auto state = checkpoint::model_state(model);
  if (!trainable_only) return state;
  std::set<std::string> trainable;
  for (const auto& p : model.named_parameters())
    if (p.value().requires_grad()) trainable.insert(p.key());
  checkpoint::NamedTensors out;
  for (auto& [name, t] : state)
    if (trainable.count(name)) out.emplace_back(name, t);
  return out;
}

std::vector<checkpoint::OptimizerSlice> StateStore::optimizer_slices(const torch::nn::Module& model) const {
  std::vector<checkpoint::OptimizerSlice> out;
  for (auto& [name, t] : model_state(model)) out.push_back({name, 0, t});
  return out;
}

checkpoint::NamedTensors StateStore::gradients(const torch::nn::Module& model) const {
  return assemble_gradients(model, optimizer_slices(model), shard_group());
}

CheckpointLayout::CheckpointLayout(std::shared_ptr<StateStore> store, ModelSplit split)
    : store_(std::move(store)), split_(std::move(split)) {
  COLOSSAL_CHECK(store_ != nullptr, "[booster] a checkpoint layout needs a state store");
}

CheckpointLayout CheckpointLayout::with_split(ModelSplit split) const {
  COLOSSAL_CHECK(split_.tp == 1 && !split_.pipelined() && !split_.expert_parallel(),
                 "[booster] this checkpoint layout is split already");
  return CheckpointLayout(store_, std::move(split));
}

checkpoint::NamedTensors CheckpointLayout::full_model_state(const torch::nn::Module& model, bool trainable_only) const {
  auto state = store_->model_state(model, trainable_only);
  gathered_.clear();
  for (auto& [name, t] : state) {
    auto it = split_.tp_specs.find(name);
    if (it == split_.tp_specs.end() || it->second.dim < 0) continue;
    auto full = parallel::gather_full(t, it->second);
    gathered_.push_back({t, full, it->second});
    t = full;
  }
  return state;
}

void CheckpointLayout::after_model_load() {
  {
    torch::NoGradGuard no_grad;
    for (auto& g : gathered_) g.local.copy_(parallel::slice_of(g.full, g.spec, g.local.size(g.spec.dim)));
    gathered_.clear();
  }
  store_->after_load();
}

checkpoint::NamedTensors CheckpointLayout::model_state_to_save(const torch::nn::Module& model,
                                                               bool trainable_only) const {
  return gather_stages(gather_experts(full_model_state(model, trainable_only)));
}

checkpoint::NamedTensors CheckpointLayout::full_gradients(const torch::nn::Module& model) const {
  auto grads = store_->gradients(model);
  for (auto& [name, g] : grads) {
    auto it = split_.tp_specs.find(name);
    if (it != split_.tp_specs.end() && it->second.dim >= 0) g = parallel::gather_full(g, it->second);
  }
  return gather_stages(gather_experts(std::move(grads)));
}

std::vector<checkpoint::OptimizerSlice> CheckpointLayout::optimizer_slices(const torch::nn::Module& model) const {
  auto slices = store_->optimizer_slices(model);
  if (split_.tp == 1) return slices;
  const auto local = model.named_parameters();
  for (auto& s : slices) {
    const auto* param = local.find(s.name);
    COLOSSAL_CHECK(param, "[booster] optimizer state of '", s.name, "', which is not a parameter of the model");
    s.whole_shape = param->sizes().vec();
    auto spec = split_.tp_specs.find(s.name);
    if (spec != split_.tp_specs.end() && spec->second.dim >= 0) {
      s.split_dim = spec->second.dim;
      s.split_start = spec->second.local_start;
      s.split_size = spec->second.local_size;
      s.whole_shape[s.split_dim] = spec->second.full_size;
      if (spec->second.dim2 >= 0) {  // a 2D/2.5D/3D grid's block
        s.split_dim2 = spec->second.dim2;
        s.split_start2 = spec->second.local_start2;
        s.split_size2 = spec->second.local_size2;
        s.whole_shape[s.split_dim2] = spec->second.full_size2;
      }
    }
    s.name += "@tp" + std::to_string(split_.tp_rank) + "of" + std::to_string(split_.tp);
  }
  return slices;
}

// Tensor-parallel ranks, pipeline stages and ep ranks hold different parameters: each writes its
// own optimizer file, and a resume at another size (or none) finds every parameter's state by name.
bool CheckpointLayout::optimizer_sharded() const {
  return split_.tp > 1 || split_.pipelined() || split_.expert_parallel() || store_->sharded();
}

// Data-parallel replicas of a part hold the same state: the first replica writes it. Under expert
// parallelism the first replica of each ep rank writes its experts, and ep rank 0 among them the
// dense parameters too.
bool CheckpointLayout::writes_optimizer_slices() const {
  return store_->sharded() || (split_.expert_parallel() ? split_.edp_rank == 0 : split_.dp_rank == 0);
}

bool CheckpointLayout::writes_optimizer_slice(const std::string& slice) const {
  if (!split_.expert_parallel() || split_.ep.rank() == 0 || store_->sharded()) return true;
  return split_.experts.count(slice.substr(0, slice.find('@'))) > 0;  // "...@tp1of2"
}

void CheckpointLayout::exchange_names(const torch::nn::Module& model) {
  if (!split_.pipelined() && !split_.expert_parallel()) return;
  std::vector<std::string> mine;
  for (const auto& [name, t] : checkpoint::model_state(model)) mine.push_back(name);
  const std::set<std::string> own(mine.begin(), mine.end());
  for (const auto* group : {&split_.pipeline, &split_.ep}) {
    if (!group->is_member() || group->size() == 1) continue;
    for (auto& name : parallel::pipeline::all_names(*group, mine))
      if (!own.count(name)) elsewhere_.insert(std::move(name));
  }
}

// The ep group's first rank gets the other ep ranks' experts after its own tensors; the others
// keep theirs.
checkpoint::NamedTensors CheckpointLayout::gather_experts(checkpoint::NamedTensors state) const {
  if (!split_.expert_parallel()) return state;
  checkpoint::NamedTensors experts;
  for (const auto& [name, t] : state)
    if (split_.experts.count(name)) experts.emplace_back(name, t);
  auto gathered = parallel::pipeline::gather_to_first(split_.ep, std::move(experts));
  if (split_.ep.rank() != 0) return state;
  const size_t own =
      std::count_if(state.begin(), state.end(), [&](const auto& e) { return split_.experts.count(e.first) > 0; });
  for (size_t i = own; i < gathered.size(); ++i) state.push_back(std::move(gathered[i]));
  return state;
}

// Every stage's tensors to the pipeline's first rank (the one that writes).
checkpoint::NamedTensors CheckpointLayout::gather_stages(checkpoint::NamedTensors state) const {
  if (!split_.pipelined()) return state;
  return parallel::pipeline::gather_to_first(split_.pipeline, std::move(state));
}

}  // namespace colossal::booster
