#include "core/parallel/autograd_group.h"
#include "core/parallel/fp8_payload.h"
#include "core/parallel/gather_along.h"
#include "core/parallel/tensor/comm_ops.h"

#include <torch/autograd.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;


torch::Tensor all_reduced(const torch::Tensor& t, const dist::Group& g) {
  auto out = t.contiguous().clone();
  dist::all_reduce(out, g);
  return out;
}

torch::Tensor own_slice(const torch::Tensor& t, int64_t dim, const dist::Group& g) {
  const int64_t d = t.size(dim);
  COLOSSAL_CHECK(d % g.size() == 0, "[tp] dimension ", dim, " of ", t.sizes(), " does not divide by the group size ",
                 g.size());
  const int64_t part = d / g.size();
  return t.narrow(dim, g.rank() * part, part).contiguous();
}

struct CopyToGroup : torch::autograd::Function<CopyToGroup> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<GroupHolder> g) {
    save_group(ctx, g);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], saved_group(ctx)), torch::Tensor()};
  }
};

struct ReduceFromGroup : torch::autograd::Function<ReduceFromGroup> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, c10::intrusive_ptr<GroupHolder> g) {
    return all_reduced(x, g->group);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<GroupHolder> g) {
    save_group(ctx, g);
    return all_reduced(x, g->group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {all_reduced(grads[0], saved_group(ctx)), torch::Tensor()};
  }
};

// The four steps along a dimension, as forward/backward pairs of one autograd function. The
// gathers of activations and their gradients carry FP8 on a tagged handle; reductions stay exact
// (FP8 partial sums would add their rounding once per rank).
torch::Tensor activation_gather(const torch::Tensor& t, int64_t dim, const dist::Group& g) {
  return all_gather_along_payload(t, dim, g, amp::Fp8Format::kE4M3);
}
torch::Tensor gradient_gather(const torch::Tensor& t, int64_t dim, const dist::Group& g) {
  return all_gather_along_payload(t, dim, g, amp::Fp8Format::kE5M2);
}
using DimStep = torch::Tensor (*)(const torch::Tensor&, int64_t, const dist::Group&);

template <DimStep Forward, DimStep Backward>
struct AlongDim : torch::autograd::Function<AlongDim<Forward, Backward>> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t dim,
                               c10::intrusive_ptr<GroupHolder> g) {
    save_group(ctx, g);
    ctx->saved_data["dim"] = dim;
    return Forward(x, dim, g->group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {Backward(grads[0], ctx->saved_data["dim"].toInt(), saved_group(ctx)), torch::Tensor(), torch::Tensor()};
  }
};

using GatherWholeAlongDim = AlongDim<all_gather_along, own_slice>;
using SplitAlongDim = AlongDim<own_slice, all_gather_along>;
using GatherAlongDim = AlongDim<activation_gather, reduce_scatter_along>;
using ReduceScatterAlongDim = AlongDim<reduce_scatter_along, gradient_gather>;

bool spans(const dist::Group& g) { return g.is_member() && g.size() > 1; }

template <typename F>
torch::Tensor apply_tensor_op(const torch::Tensor& x, const dist::Group& g) {
  if (g.size() == 1) return x;
  return F::apply(x, hold(g));
}

}  // namespace

torch::Tensor copy_to_group(const torch::Tensor& x, const dist::Group& g) { return apply_tensor_op<CopyToGroup>(x, g); }
torch::Tensor reduce_from_group(const torch::Tensor& x, const dist::Group& g) { return apply_tensor_op<ReduceFromGroup>(x, g); }
torch::Tensor gather_last_dim(const torch::Tensor& x, const dist::Group& g) { return gather_whole_along_dim(x, -1, g); }
torch::Tensor split_last_dim(const torch::Tensor& x, const dist::Group& g) { return split_along_dim(x, -1, g); }

torch::Tensor gather_whole_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  return spans(g) ? GatherWholeAlongDim::apply(x, dim, hold(g)) : x;
}

torch::Tensor split_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  return spans(g) ? SplitAlongDim::apply(x, dim, hold(g)) : x;
}

torch::Tensor all_reduce_sum(const torch::Tensor& x, const dist::Group& g) {
  return spans(g) ? AllReduceSum::apply(x, hold(g)) : x;
}

torch::Tensor gather_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  return spans(g) ? GatherAlongDim::apply(x, dim, hold(g)) : x;
}

torch::Tensor reduce_scatter_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  return spans(g) ? ReduceScatterAlongDim::apply(x, dim, hold(g)) : x;
}

}  // namespace colossal::parallel
