#include "core/nn/fused_losses.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include "core/common/check.h"
#include "core/cuda/ops.h"
#include "kernels/cpu/cross_entropy.h"

namespace colossal::nn {
namespace {

// Rows per block: about 1 MiB of fp32 logits, so the second look at a block hits cache.
int64_t rows_per_block(int64_t vocab) { return std::max<int64_t>(1, (int64_t{1} << 18) / vocab); }

// fn runs ATen operators on the workers: they take the caller's thread-local state (grad mode
// off inside an autograd function, the dispatch keys), which OpenMP threads do not inherit.
template <typename Fn>
void for_row_blocks(int64_t n, int64_t vocab, Fn&& fn) {
  const int64_t block = rows_per_block(vocab);
  const at::ThreadLocalState caller;
  at::parallel_for(0, n, block, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard same_state(caller);
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

void check_targets(const torch::Tensor& target, int64_t n, int64_t vocab, int64_t ignore_index, const char* op) {
  COLOSSAL_CHECK(target.dim() == 1 && target.size(0) == n, "[nn] ", op, ": expected target [", n, "], got ",
                 target.sizes());
  COLOSSAL_CHECK(target.scalar_type() == torch::kLong, "[nn] ", op, ": target must be int64, got ",
                 target.scalar_type());
  auto in_range = target.eq(ignore_index).logical_or(target.ge(0).logical_and(target.lt(vocab)));
  COLOSSAL_CHECK(in_range.all().item<bool>(), "[nn] ", op, ": a target is outside [0, ", vocab,
                 ") and is not ignore_index ", ignore_index);
}

// Per row of fp32 or bf16 logits [n, v]: -log p(target) into an fp32 [n] (0 where ignored), and
// with `gradient` the logits overwritten by scale * (softmax - one_hot) (kernels/cpu/cross_entropy).
torch::Tensor cross_entropy_rows_in_place(torch::Tensor& logits, const torch::Tensor& target, int64_t ignore_index,
                                          bool gradient, float scale, const char* trace_name) {
  const int64_t n = logits.size(0), v = logits.size(1);
  auto loss_rows = torch::empty({n}, logits.options().dtype(torch::kFloat));
  namespace kc = colossal::kernels::cpu;
  kc::CrossEntropyRows rows;
  rows.vocab = v;
  rows.ignore_index = ignore_index;
  rows.write_gradient = gradient;
  rows.gradient_scale = scale;
  const bool bf16 = logits.scalar_type() == torch::kBFloat16;
  const int64_t* t = target.data_ptr<int64_t>();
  float* loss = loss_rows.data_ptr<float>();
  RECORD_FUNCTION(trace_name, {});  // named in profiler traces
  at::parallel_for(0, n, 1, [&](int64_t r0, int64_t r1) {
    auto part = rows;
    part.rows = r1 - r0;
    part.target = t + r0;
    part.loss = loss + r0;
    if (bf16) {
      std::vector<float> scratch(v);
      kc::cross_entropy_rows_bf16(reinterpret_cast<uint16_t*>(logits.data_ptr<at::BFloat16>()) + r0 * v, part,
                                  scratch.data());
    } else {
      kc::cross_entropy_rows(logits.data_ptr<float>() + r0 * v, part);
    }
  });
  return loss_rows;
}

struct LinearCrossEntropyFunction : torch::autograd::Function<LinearCrossEntropyFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& target, int64_t ignore_index,
                               bool want_grad) {
    auto logits = at::mm(hidden, weight.t());  // becomes the gradient with respect to itself
    const int64_t count = target.ne(ignore_index).sum().item<int64_t>();
    auto loss_rows = cross_entropy_rows_in_place(logits, target, ignore_index, want_grad,
                                                 count > 0 ? 1.0f / static_cast<float>(count) : 0.0f,
                                                 "colossal::cross_entropy_rows");
    if (want_grad) ctx->save_for_backward({logits, hidden, weight});
    // No counted target: nan, as torch's mean over nothing gives.
    return loss_rows.sum() / static_cast<double>(count);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& dlogits = saved[0];
    const float g = grads[0].item<float>();
    torch::Tensor d_hidden, d_weight;
    if (ctx->needs_input_grad(0)) d_hidden = at::mm(dlogits, saved[2]);
    if (ctx->needs_input_grad(1)) d_weight = at::mm(dlogits.t(), saved[1]);
    if (g != 1.0f) {  // a scaled loss (fp16) or a weighted sum of losses
      if (d_hidden.defined()) d_hidden.mul_(g);
      if (d_weight.defined()) d_weight.mul_(g);
    }
    return {d_hidden, d_weight, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Per-row log-probabilities with the head fused in (CPU): the kernel's loss row is -log p and the
// gradient it writes, softmax - one_hot, is d(-log p)/d logits; backward scales each row by minus
// its incoming gradient.
struct LinearTokenLogProbsFunction : torch::autograd::Function<LinearTokenLogProbsFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& target, int64_t ignore_index,
                               bool want_grad) {
    auto logits = at::mm(hidden, weight.t());
    auto nll = cross_entropy_rows_in_place(logits, target, ignore_index, want_grad, 1.0f,
                                           "colossal::token_log_probs_rows");
    if (want_grad) ctx->save_for_backward({logits, hidden, weight});
    return nll.neg_();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto dlogits = saved[0];  // softmax - one_hot, spent here
    dlogits.mul_(grads[0].neg().to(dlogits.scalar_type()).unsqueeze(1));
    torch::Tensor d_hidden, d_weight;
    if (ctx->needs_input_grad(0)) d_hidden = at::mm(dlogits, saved[2]);
    if (ctx->needs_input_grad(1)) d_weight = at::mm(dlogits.t(), saved[1]);
    return {d_hidden, d_weight, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// On the GPU the rows go in chunks: each chunk's logits are made, turned into their gradient
// in place (kernels/cuda/cross_entropy, 1/count read on the device: no host sync), and spent at
// once on both products of the linear layer's backward. So at most one chunk of logits exists
// at any time (a 128k vocabulary at 4k tokens would otherwise hold 2 GiB of them); backward only
// scales the two gradients by the incoming one.
struct LinearCrossEntropyCudaFunction : torch::autograd::Function<LinearCrossEntropyCudaFunction> {
  // Logits per chunk: 256 MiB.
  static int64_t rows_per_chunk(int64_t vocab, int64_t element_size) {
    return std::max<int64_t>(1, (int64_t{256} << 20) / (vocab * element_size));
  }

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& target, int64_t ignore_index,
                               bool want_hidden_grad, bool want_weight_grad) {
    const int64_t n = hidden.size(0), v = weight.size(0);
    auto count = target.ne(ignore_index).sum().to(torch::kFloat);
    auto scale = count.reciprocal().reshape({1});  // rows that count; ignored rows get 0 in the kernel
    auto loss_rows = torch::empty({n}, hidden.options().dtype(torch::kFloat));
    const bool want_grad = want_hidden_grad || want_weight_grad;
    torch::Tensor d_hidden, d_weight;
    if (want_hidden_grad) d_hidden = torch::empty_like(hidden);
    if (want_weight_grad) d_weight = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    const int64_t chunk = rows_per_chunk(v, hidden.element_size());
    for (int64_t r0 = 0; r0 < n; r0 += chunk) {
      const int64_t len = std::min(chunk, n - r0);
      auto h = hidden.narrow(0, r0, len);
      auto logits = at::mm(h, weight.t());
      loss_rows.narrow(0, r0, len)
          .copy_(cuda::cross_entropy_rows(logits, target.narrow(0, r0, len), ignore_index,
                                          want_grad ? scale : torch::Tensor()));
      if (want_hidden_grad) {
        auto rows = d_hidden.narrow(0, r0, len);
        at::mm_out(rows, logits, weight);
      }
      if (want_weight_grad) {
        if (logits.scalar_type() == torch::kFloat)
          d_weight.addmm_(logits.t(), h);
        else
          d_weight.add_(at::mm(logits.t(), h));  // the chunks summed in fp32
      }
    }
    if (want_weight_grad) d_weight = d_weight.to(weight.scalar_type());
    if (want_grad) ctx->save_for_backward({d_hidden, d_weight});
    // No counted target: nan, as torch's mean over nothing gives.
    return loss_rows.sum() / count;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& g = grads[0];  // a scalar on the device: scaling by it needs no sync
    torch::Tensor d_hidden, d_weight;
    if (saved[0].defined()) d_hidden = saved[0] * g.to(saved[0].scalar_type());
    if (saved[1].defined()) d_weight = saved[1] * g.to(saved[1].scalar_type());
    return {d_hidden, d_weight, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

void check_linear_inputs(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& target,
                         const char* op) {
  COLOSSAL_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1), "[nn] ", op,
                 ": expected hidden [N, D] and weight [V, D], got ", hidden.sizes(), " and ", weight.sizes());
  COLOSSAL_CHECK(hidden.scalar_type() == weight.scalar_type() &&
                     (hidden.scalar_type() == torch::kFloat || hidden.scalar_type() == torch::kBFloat16),
                 "[nn] ", op, ": hidden and weight must both be fp32 or both bf16, got ", hidden.scalar_type(), " and ",
                 weight.scalar_type());
  COLOSSAL_CHECK(hidden.device() == weight.device() && target.device() == hidden.device(), "[nn] ", op,
                 ": hidden, weight and target must share a device, got ", hidden.device(), ", ", weight.device(),
                 " and ", target.device());
}

}  // namespace

torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& target, int64_t ignore_index) {
  COLOSSAL_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
                 "[nn] token_log_probs: expected logits [N, V] and target [N], got ", logits.sizes(), " and ",
                 target.sizes());
  check_targets(target, logits.size(0), logits.size(1), ignore_index, "token_log_probs");
  auto valid = target.ne(ignore_index);
  auto safe = torch::where(valid, target, torch::zeros_like(target));
  auto picked = torch::log_softmax(logits.to(torch::kFloat), 1).gather(1, safe.unsqueeze(1)).squeeze(1);
  return picked * valid.to(picked.scalar_type());
}

torch::Tensor linear_token_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& target, int64_t ignore_index) {
  check_linear_inputs(hidden, weight, target, "linear_token_log_probs");
  check_targets(target, hidden.size(0), weight.size(0), ignore_index, "linear_token_log_probs");
  if (!hidden.device().is_cpu()) return token_log_probs(at::mm(hidden, weight.t()), target, ignore_index);
  const bool want_grad = torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearTokenLogProbsFunction::apply(hidden.contiguous(), weight.contiguous(), target.contiguous(),
                                            ignore_index, want_grad);
}

torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& target,
                                   int64_t ignore_index) {
  check_linear_inputs(hidden, weight, target, "linear_cross_entropy");
  COLOSSAL_CHECK(hidden.device().is_cpu() || hidden.is_cuda(), "[nn] linear_cross_entropy: CPU or CUDA tensors, got ",
                 hidden.device());
  check_targets(target, hidden.size(0), weight.size(0), ignore_index, "linear_cross_entropy");
  if (hidden.is_cuda()) {
    const bool grad = torch::GradMode::is_enabled();
    return LinearCrossEntropyCudaFunction::apply(hidden.contiguous(), weight.contiguous(), target.contiguous(),
                                                 ignore_index, grad && hidden.requires_grad(),
                                                 grad && weight.requires_grad());
  }
  // Decided here: inside forward, autograd is off and the context has no inputs to ask about.
  const bool want_grad = torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearCrossEntropyFunction::apply(hidden, weight, target.contiguous(), ignore_index, want_grad);
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, int64_t ignore_index) {
  COLOSSAL_CHECK(logits.dim() == 2 && target.dim() == 1 && target.size(0) == logits.size(0),
                 "[nn] cross_entropy: expected logits [N, V] and target [N], got ", logits.sizes(), " and ",
                 target.sizes());
  check_targets(target, logits.size(0), logits.size(1), ignore_index, "cross_entropy");
  return CrossEntropyFunction::apply(logits.contiguous(), target.contiguous(), ignore_index);
}

}  // namespace colossal::nn
