#include "core/parallel/gather_along.h"
#include "core/parallel/tensor/shard.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::parallel {

std::map<std::string, ShardSpec> collect_shard_specs(const torch::nn::Module& model) {
  std::map<std::string, ShardSpec> out;
  // Not include_self: that needs the model held by a shared_ptr, which a constructor's `this` is not.
  if (const auto* self = dynamic_cast<const ShardedModule*>(&model))
    for (const auto& [name, spec] : self->shard_specs()) out[name] = spec;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    const auto* sharded = dynamic_cast<const ShardedModule*>(item.value().get());
    if (sharded == nullptr) continue;
    for (const auto& [name, spec] : sharded->shard_specs())
      out[item.key().empty() ? name : item.key() + "." + name] = spec;
  }
  return out;
}

namespace {

// The second cut (grids), applied to a tensor already cut along the first.
torch::Tensor second_cut(const torch::Tensor& t, const ShardSpec& spec) {
  if (spec.dim2 < 0) return t;
  COLOSSAL_CHECK(t.dim() > spec.dim2 && t.size(spec.dim2) == spec.full_size2, "[tp] expected a tensor with ",
                 spec.full_size2, " entries along dimension ", spec.dim2, ", got ", t.sizes());
  return t.narrow(spec.dim2, spec.local_start2, spec.local_size2);
}

}  // namespace

torch::Tensor slice_of(const torch::Tensor& full, const ShardSpec& spec, int64_t padded_local_size) {
  if (spec.dim < 0) return full;
  COLOSSAL_CHECK(full.dim() > spec.dim && full.size(spec.dim) == spec.full_size, "[tp] expected a tensor with ",
                 spec.full_size, " entries along dimension ", spec.dim, ", got ", full.sizes());
  if (spec.local_size == padded_local_size)
    return second_cut(full.narrow(spec.dim, spec.local_start, spec.local_size), spec);
  auto sizes = full.sizes().vec();
  sizes[spec.dim] = padded_local_size;
  if (spec.dim2 >= 0) sizes[spec.dim2] = spec.local_size2;
  auto out = torch::zeros(sizes, full.options());  // a rank past the vocabulary holds only padding
  if (spec.local_size > 0)
    out.narrow(spec.dim, 0, spec.local_size).copy_(second_cut(full.narrow(spec.dim, spec.local_start, spec.local_size),
                                                              spec));
  return out;
}

const ShardSpec* split_spec(const std::map<std::string, ShardSpec>& specs, const std::string& name) {
  auto it = specs.find(name);
  return it != specs.end() && it->second.dim >= 0 ? &it->second : nullptr;
}

std::vector<int64_t> full_shape(const torch::Tensor& local, const ShardSpec* split) {
  auto shape = local.sizes().vec();
  if (split) shape[split->dim] = split->full_size;
  if (split && split->dim2 >= 0) shape[split->dim2] = split->full_size2;
  return shape;
}

torch::Tensor local_part(const torch::Tensor& full, const ShardSpec* split, const torch::Tensor& local) {
  return split ? slice_of(full, *split, local.size(split->dim)).clone() : full;
}

torch::Tensor gather_full(const torch::Tensor& local, const ShardSpec& spec) {
  auto spans = [](const dist::Group& g) { return g.is_member() && g.size() > 1; };
  if (spec.dim < 0) return local;
  auto t = local;
  if (spec.dim2 >= 0 && spans(spec.group2)) t = all_gather_along(t, spec.dim2, spec.group2);
  if (!spans(spec.group)) return t;
  // Padding sits only at the end of the last ranks' slices, so the first full_size rows are the
  // tensor.
  return all_gather_along(t, spec.dim, spec.group).narrow(spec.dim, 0, spec.full_size).contiguous();
}

int register_partial_gradient_hooks(torch::nn::Module& model) {
  const auto specs = collect_shard_specs(model);
  int count = 0;
  for (auto& item : model.named_parameters()) {
    auto it = specs.find(item.key());
    if (it == specs.end() || !it->second.gradient_partial || !item.value().requires_grad()) continue;
    const dist::Group group = it->second.group;
    if (!group.is_member() || group.size() == 1) continue;
    item.value().register_hook([group](torch::Tensor grad) {
      auto sum = grad.contiguous().clone();
      dist::all_reduce(sum, group);
      return sum;
    });
    ++count;
  }
  return count;
}

}  // namespace colossal::parallel
