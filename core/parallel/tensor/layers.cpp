#include "core/parallel/autograd_group.h"
#include "core/parallel/tensor/layers.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/tensor/comm_ops.h"

namespace colossal::parallel {

int64_t padded_vocab(int64_t vocab, int tp) {
  const int64_t m = 64 * static_cast<int64_t>(tp);
  return (vocab + m - 1) / m * m;
}

torch::Tensor vocab_parallel_partial_lookup(const torch::Tensor& weight, const torch::Tensor& ids, int64_t start) {
  auto mine = ids.ge(start).logical_and(ids.lt(start + weight.size(0)));
  auto local = torch::where(mine, ids - start, torch::zeros_like(ids));
  return torch::embedding(weight, local) * mine.unsqueeze(-1).to(weight.scalar_type());
}

torch::Tensor vocab_parallel_lookup(const torch::Tensor& weight, const torch::Tensor& ids, int64_t start,
                                    const dist::Group& group) {
  return reduce_from_group(vocab_parallel_partial_lookup(weight, ids, start), group);
}

namespace {

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target, c10::intrusive_ptr<GroupHolder> holder,
                               int64_t ignore_index, double divisor) {
    const auto& g = holder->group;
    const int64_t per_rank = logits.size(1), start = g.rank() * per_rank;
    auto x = logits.to(torch::kFloat);
    auto max = std::get<0>(x.max(1)).contiguous();
    dist::all_reduce(max, g, dist::ReduceOp::kMax);
    auto e = (x - max.unsqueeze(1)).exp_();
    auto sum = e.sum(1).contiguous();
    dist::all_reduce(sum, g);
    auto valid = target.ne(ignore_index);
    auto here = valid.logical_and(target.ge(start)).logical_and(target.lt(start + per_rank));
    auto local = torch::where(here, target - start, torch::zeros_like(target));
    // where(), not a product: a padded (-inf) column times 0 would be NaN.
    auto picked = torch::where(here, x.gather(1, local.unsqueeze(1)).squeeze(1), torch::zeros({}, x.options()))
                      .contiguous();
    dist::all_reduce(picked, g);
    auto per_row = (sum.log() + max - picked).masked_fill_(valid.logical_not(), 0);
    const double count = divisor > 0 ? divisor : static_cast<double>(valid.sum().item<int64_t>());
    e.div_(sum.unsqueeze(1));  // softmax over the whole vocabulary, this rank's columns
    ctx->save_for_backward({e, local, here, valid});
    ctx->saved_data["count"] = count;
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return per_row.sum() / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto s = ctx->get_saved_variables();
    auto g = s[0].clone();
    const auto& local = s[1];
    const auto& here = s[2];
    const auto& valid = s[3];
    g.scatter_add_(1, local.unsqueeze(1), -here.to(torch::kFloat).unsqueeze(1));
    const double scale = grads[0].item<double>() / ctx->saved_data["count"].toDouble();
    g.mul_(valid.to(torch::kFloat).mul(scale).unsqueeze(1));
    auto dtype = static_cast<c10::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g.to(dtype), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           const dist::Group& group, int64_t ignore_index, double divisor) {
  COLOSSAL_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
                 "[tp] vocab_parallel_cross_entropy: expected logits [N, V/tp] and target [N], got ", logits.sizes(),
                 " and ", target.sizes());
  return VocabParallelCrossEntropy::apply(logits, target, hold(group), ignore_index, divisor);
}

}  // namespace colossal::parallel
