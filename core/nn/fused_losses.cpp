#include "core/nn/fused_losses.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include "core/common/check.h"

namespace colossal::nn {
namespace {

// Rows per block: about 1 MiB of fp32 logits, so the second look at a block hits cache.
int64_t rows_per_block(int64_t vocab) { return std::max<int64_t>(1, (int64_t{1} << 18) / vocab); }

template <typename Fn>
void for_row_blocks(int64_t n, int64_t vocab, Fn&& fn) {
  const int64_t block = rows_per_block(vocab);
  at::parallel_for(0, n, block, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; r += block) fn(r, std::min(end, r + block));
  });
}

struct CrossEntropyFunction : torch::autograd::Function<CrossEntropyFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target, int64_t ignore_index) {
    const int64_t n = logits.size(0), v = logits.size(1);
    auto lse = torch::empty({n}, logits.options().dtype(torch::kFloat));
    auto picked = torch::zeros({n}, lse.options());
    auto valid = target.ne(ignore_index);
    auto safe_target = torch::where(valid, target, torch::zeros_like(target));
    for_row_blocks(n, v, [&](int64_t r0, int64_t r1) {
      auto x = logits.slice(0, r0, r1).to(torch::kFloat);
      auto m = std::get<0>(x.max(1, /*keepdim=*/true));
      auto s = (x - m).exp_().sum(1, /*keepdim=*/true);
      lse.slice(0, r0, r1).copy_((s.log_() + m).squeeze(1));
      picked.slice(0, r0, r1).copy_(x.gather(1, safe_target.slice(0, r0, r1).unsqueeze(1)).squeeze(1));
    });
    auto count = valid.sum().item<int64_t>();
    auto per_row = (lse - picked).masked_fill_(valid.logical_not(), 0);
    ctx->save_for_backward({logits, safe_target, valid, lse});
    ctx->saved_data["count"] = count;
    // No valid target: nan, as torch's mean over nothing gives.
    return per_row.sum() / static_cast<double>(count);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& logits = saved[0];
    const auto& target = saved[1];
    const auto& valid = saved[2];
    const auto& lse = saved[3];
    const int64_t n = logits.size(0), v = logits.size(1);
    const double scale = grads[0].item<double>() / static_cast<double>(ctx->saved_data["count"].toInt());
    auto grad = torch::empty_like(logits);
    auto row_scale = valid.to(torch::kFloat).mul_(scale).unsqueeze(1);  // 0 for ignored rows
    for_row_blocks(n, v, [&](int64_t r0, int64_t r1) {
      auto x = logits.slice(0, r0, r1);
      const bool direct = x.scalar_type() == torch::kFloat;  // write straight into the gradient
      auto g = direct ? grad.slice(0, r0, r1) : torch::empty(x.sizes(), lse.options());
      at::sub_out(g, x.to(torch::kFloat), lse.slice(0, r0, r1).unsqueeze(1));
      g.exp_();
      auto t = target.slice(0, r0, r1).unsqueeze(1);
      g.scatter_add_(1, t, torch::full(t.sizes(), -1.0f, g.options()));
      g.mul_(row_scale.slice(0, r0, r1));
      if (!direct) grad.slice(0, r0, r1).copy_(g);
    });
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, int64_t ignore_index) {
  COLOSSAL_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
                 "[nn] cross_entropy: expected logits [N, V] and target [N], got ", logits.sizes(), " and ",
                 target.sizes());
  COLOSSAL_CHECK(target.scalar_type() == torch::kLong, "[nn] cross_entropy: target must be int64, got ",
                 target.scalar_type());
  auto in_range = target.eq(ignore_index).logical_or(target.ge(0).logical_and(target.lt(logits.size(1))));
  COLOSSAL_CHECK(in_range.all().item<bool>(), "[nn] cross_entropy: a target is outside [0, ", logits.size(1),
                 ") and is not ignore_index ", ignore_index);
  return CrossEntropyFunction::apply(logits.contiguous(), target.contiguous(), ignore_index);
}

}  // namespace colossal::nn
