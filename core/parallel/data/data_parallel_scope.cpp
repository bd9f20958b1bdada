#include "core/parallel/data/data_parallel_scope.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/common/fault.h"
#include "core/dist/runtime.h"

namespace colossal::parallel {

dist::Group DataParallelScope::resolved_group() const { return group.is_member() ? group : dist::world_group(); }

namespace {
// Sum then divide, or let the backend average when the divisor is the group size.
bool plain_average(const DataParallelScope& s, const dist::Group& g) {
  return s.gradient_divisor == 0 || s.gradient_divisor == g.size() ||
         fault_injected("average_over_sequence_parallel");  // the bug colossal verify must catch
}
}  // namespace

dist::Group DataParallelScope::reduction_group(bool expert) const {
  if (!expert) return resolved_group();
  COLOSSAL_CHECK(expert_group.is_member(), "[dp] expert parameters without an expert data-parallel group");
  return expert_group;
}

dist::Handle DataParallelScope::reduce_async(at::Tensor& flat, bool expert) const {
  auto g = reduction_group(expert);
  if (plain_average(*this, g)) return dist::all_reduce_async(flat, g, dist::ReduceOp::kAvg);
  flat.mul_(1.0 / gradient_divisor);
  return dist::all_reduce_async(flat, g, dist::ReduceOp::kSum);
}

dist::Handle DataParallelScope::reduce_scatter_async(at::Tensor& out, const at::Tensor& in, bool expert) const {
  auto g = reduction_group(expert);
  if (plain_average(*this, g)) return dist::reduce_scatter_async(out, in, g, dist::ReduceOp::kAvg);
  // `in` is the caller's send buffer, free to scale in place.
  const_cast<at::Tensor&>(in).mul_(1.0 / gradient_divisor);
  return dist::reduce_scatter_async(out, in, g, dist::ReduceOp::kSum);
}

bool DataParallelScope::counts_in_norm(const std::string& name) const {
  if (!norm_group.is_member() || norm_group.size() == 1) return true;
  if (!split_over_norm_group.count(name)) return norm_group.rank() == 0;
  auto it = block_replicas.find(name);
  return it == block_replicas.end() || !it->second.is_member() || it->second.rank() == 0;
}

bool DataParallelScope::norm_spans_ranks() const {
  auto spans = [](const dist::Group& g) { return g.is_member() && g.size() > 1; };
  return spans(norm_group) || spans(pipeline_group) || spans(expert_norm_group);
}

double DataParallelScope::combine_over_norm_group(double local, bool inf_norm, double local_expert) const {
  const auto op = inf_norm ? dist::ReduceOp::kMax : dist::ReduceOp::kSum;
  if (expert_norm_group.is_member() && expert_norm_group.size() > 1) {
    auto e = torch::tensor({local_expert}, torch::kFloat64);
    dist::all_reduce(e, expert_norm_group, op);
    local_expert = e.item<double>();
  }
  local = inf_norm ? std::max(local, local_expert) : local + local_expert;
  auto t = torch::tensor({local}, torch::kFloat64);
  for (const auto* g : {&norm_group, &pipeline_group})
    if (g->is_member() && g->size() > 1) dist::all_reduce(t, *g, op);
  return t.item<double>();
}

}  // namespace colossal::parallel
