#include "core/parallel/data/data_parallel_scope.h"

#include <torch/torch.h>

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

dist::Handle DataParallelScope::reduce_async(at::Tensor& flat) const {
  auto g = resolved_group();
  if (plain_average(*this, g)) return dist::all_reduce_async(flat, g, dist::ReduceOp::kAvg);
  flat.mul_(1.0 / gradient_divisor);
  return dist::all_reduce_async(flat, g, dist::ReduceOp::kSum);
}

dist::Handle DataParallelScope::reduce_scatter_async(at::Tensor& out, const at::Tensor& in) const {
  auto g = resolved_group();
  if (plain_average(*this, g)) return dist::reduce_scatter_async(out, in, g, dist::ReduceOp::kAvg);
  // `in` is the caller's send buffer, free to scale in place.
  const_cast<at::Tensor&>(in).mul_(1.0 / gradient_divisor);
  return dist::reduce_scatter_async(out, in, g, dist::ReduceOp::kSum);
}

bool DataParallelScope::counts_in_norm(const std::string& name) const {
  if (!norm_group.is_member() || norm_group.size() == 1) return true;
  return norm_group.rank() == 0 || split_over_norm_group.count(name) > 0;
}

bool DataParallelScope::norm_spans_ranks() const {
  return (norm_group.is_member() && norm_group.size() > 1) || (pipeline_group.is_member() && pipeline_group.size() > 1);
}

double DataParallelScope::combine_over_norm_group(double local, bool inf_norm) const {
  auto t = torch::tensor({local}, torch::kFloat64);
  for (const auto* g : {&norm_group, &pipeline_group})
    if (g->is_member() && g->size() > 1) dist::all_reduce(t, *g, inf_norm ? dist::ReduceOp::kMax : dist::ReduceOp::kSum);
  return t.item<double>();
}

}  // namespace colossal::parallel
