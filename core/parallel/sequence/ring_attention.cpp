#include "core/parallel/autograd_group.h"
#include "core/parallel/sequence/ring_attention.h"

#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu.h>
#include <ATen/ops/_scaled_dot_product_flash_attention_for_cpu_backward.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// One attention block with its log-sum-exp. On CPU LibTorch's flash kernel returns both (and
// its backward accepts the final output and log-sum-exp of the merged result); elsewhere the
// scores are formed explicitly.
struct Block {
  torch::Tensor out, lse;  // [B, H, Tq, D] in the input dtype, [B, H, Tq] fp32
};

// `visible` [Tq, Tk] (bool, optional): a sliding window's mask over the block; rows that see
// nothing get lse -inf and a zero output, which the merge below weighs as nothing.
Block block_forward(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal, double scale,
                    const std::optional<torch::Tensor>& visible = std::nullopt) {
  if (q.is_cpu() && !visible) {
    auto [out, lse] = at::_scaled_dot_product_flash_attention_for_cpu(q.contiguous(), k.contiguous(), v.contiguous(),
                                                                      0.0, causal, std::nullopt, scale);
    return {out, lse};
  }
  auto s = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-1, -2)) * scale;
  if (causal) s = s.masked_fill(torch::ones({q.size(2), k.size(2)}, s.options().dtype(torch::kBool)).triu(1), -INFINITY);
  if (visible) s = s.masked_fill(visible->logical_not(), -INFINITY);
  auto lse = s.logsumexp(-1);
  auto p = (s - lse.unsqueeze(-1)).exp();
  if (visible) p = p.nan_to_num(0.0);  // rows with nothing visible: -inf - -inf
  auto out = torch::matmul(p, v.to(torch::kFloat));
  return {out.to(q.scalar_type()), lse};
}

struct BlockGrads {
  torch::Tensor dq, dk, dv;
};

// `lse` is the merged log-sum-exp of the whole row, finite for every row (each query sees itself).
BlockGrads block_backward(const torch::Tensor& dout, const torch::Tensor& q, const torch::Tensor& k,
                          const torch::Tensor& v, const torch::Tensor& out, const torch::Tensor& lse, bool causal,
                          double scale, const std::optional<torch::Tensor>& visible = std::nullopt) {
  if (q.is_cpu() && !visible) {
    auto [dq, dk, dv] = at::_scaled_dot_product_flash_attention_for_cpu_backward(
        dout.contiguous(), q.contiguous(), k.contiguous(), v.contiguous(), out.contiguous(), lse.contiguous(), 0.0,
        causal, std::nullopt, scale);
    return {dq, dk, dv};
  }
  auto qf = q.to(torch::kFloat), kf = k.to(torch::kFloat), vf = v.to(torch::kFloat);
  auto dof = dout.to(torch::kFloat), of = out.to(torch::kFloat);
  auto s = torch::matmul(qf, kf.transpose(-1, -2)) * scale;
  if (causal) s = s.masked_fill(torch::ones({q.size(2), k.size(2)}, s.options().dtype(torch::kBool)).triu(1), -INFINITY);
  if (visible) s = s.masked_fill(visible->logical_not(), -INFINITY);
  auto p = (s - lse.unsqueeze(-1)).exp();
  auto dv = torch::matmul(p.transpose(-1, -2), dof);
  auto dp = torch::matmul(dof, vf.transpose(-1, -2));
  auto ds = p * (dp - (dof * of).sum(-1, true));
  return {torch::matmul(ds, kf) * scale, torch::matmul(ds.transpose(-1, -2), qf) * scale, dv};
}

// Sends `t` to the next rank of the ring and returns what the previous rank sent. Even ranks
// send first and odd ranks receive first, so blocking point-to-point calls never wait on each
// other in a cycle (at least one rank of any ring starts by sending).
torch::Tensor ring_shift(const torch::Tensor& t, const dist::Group& g) {
  const int n = g.size(), r = g.rank();
  auto send = t.contiguous();
  auto recv = torch::empty_like(send);
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  if (r % 2 == 0) {
    dist::send(send, next, g);
    dist::recv(recv, prev, g);
  } else {
    dist::recv(recv, prev, g);
    dist::send(send, next, g);
  }
  return recv;
}

// Query heads h read key/value head h / groups (as scaled_dot_product_attention's enable_gqa).
torch::Tensor expand_heads(const torch::Tensor& kv, int64_t groups) {
  return groups == 1 ? kv : kv.repeat_interleave(groups, 1);
}
torch::Tensor fold_heads(const torch::Tensor& g, int64_t groups) {
  if (groups == 1) return g;
  auto s = g.sizes().vec();
  return g.view({s[0], s[1] / groups, groups, s[2], s[3]}).sum(2);
}

// Which part of the local sequence a step touches: the rows of q and the columns of k/v.
struct StepShape {
  bool causal;
  int64_t q_start, q_len, kv_start, kv_len;
};

StepShape step_shape(int step, int owner, int rank, int64_t chunk) {
  if (step == 0) return {true, 0, 2 * chunk, 0, 2 * chunk};
  if (owner < rank) return {false, 0, 2 * chunk, 0, chunk};  // everything sees its first chunk
  return {false, chunk, chunk, 0, 2 * chunk};                // only the second chunk sees it, whole
}

// Global positions of a rank's 2 x chunk local tokens (its zigzag chunks r and 2n-1-r).
torch::Tensor zigzag_positions(int rank, int n, int64_t chunk) {
  auto i = torch::arange(chunk, torch::kLong);
  return torch::cat({i + rank * chunk, i + (2 * n - 1 - rank) * chunk});
}

// What a step does under a sliding window of `window` tokens (query p sees keys in
// (p - window, p]): nothing when the block lies wholly behind the window, the plain (causal or
// full) block when the window cuts none of it, else a mask over the block.
struct WindowCut {
  bool skip = false;
  std::optional<torch::Tensor> visible;
};

WindowCut window_cut(const StepShape& sh, int owner, int rank, int n, int64_t chunk, int64_t window,
                     const torch::Device& device) {
  if (window <= 0) return {};
  auto pq = zigzag_positions(rank, n, chunk).narrow(0, sh.q_start, sh.q_len).unsqueeze(1);
  auto pk = zigzag_positions(owner, n, chunk).narrow(0, sh.kv_start, sh.kv_len).unsqueeze(0);
  auto causal = pk <= pq, visible = causal.logical_and(pk > pq - window);
  if (!visible.any().item<bool>()) return {true, std::nullopt};
  if (visible.equal(sh.causal ? causal : torch::ones_like(visible))) return {};
  return {false, visible.to(device)};
}

struct RingAttention : torch::autograd::Function<RingAttention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, c10::intrusive_ptr<GroupHolder> holder, int64_t window,
                               double scale) {
    ctx->saved_data["window"] = window;
    ctx->saved_data["scale"] = scale;
    const auto& g = holder->group;
    const int n = g.size(), r = g.rank();
    const int64_t groups = q.size(1) / k.size(1), chunk = q.size(2) / 2;
    auto out = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
    auto lse = torch::full({q.size(0), q.size(1), q.size(2)}, -INFINITY, q.options().dtype(torch::kFloat));
    auto kv = torch::stack({k, v}).contiguous();
    for (int s = 0; s < n; ++s) {
      const int owner = (r - s + n) % n;
      const auto sh = step_shape(s, owner, r, chunk);
      const auto cut = window_cut(sh, owner, r, n, chunk, window, q.device());
      if (!cut.skip) {
        auto kb = expand_heads(kv[0].narrow(2, sh.kv_start, sh.kv_len), groups);
        auto vb = expand_heads(kv[1].narrow(2, sh.kv_start, sh.kv_len), groups);
        auto b = block_forward(q.narrow(2, sh.q_start, sh.q_len), kb, vb, sh.causal, scale, cut.visible);
        // Online softmax: rescale what is there and what arrives to the new log-sum-exp (a
        // weight of 0 where both are -inf: rows that have seen nothing yet).
        auto o_rows = out.narrow(2, sh.q_start, sh.q_len), l_rows = lse.narrow(2, sh.q_start, sh.q_len);
        auto merged = torch::logaddexp(l_rows, b.lse);
        auto weight = [&](const torch::Tensor& l) { return (l - merged).exp().nan_to_num(0.0).unsqueeze(-1); };
        o_rows.mul_(weight(l_rows)).add_(b.out.to(torch::kFloat) * weight(b.lse));
        l_rows.copy_(merged);
      }
      if (s + 1 < n) kv = ring_shift(kv, g);
    }
    auto result = out.to(q.scalar_type());
    ctx->save_for_backward({q, k, v, result, lse});
    save_group(ctx, holder);
    return result;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto& g = saved_group(ctx);
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    auto dout = grads[0].to(q.scalar_type()).contiguous();
    const int n = g.size(), r = g.rank();
    const int64_t groups = q.size(1) / k.size(1), chunk = q.size(2) / 2;
    const double scale = ctx->saved_data["scale"].toDouble();
    const int64_t window = ctx->saved_data["window"].toInt();
    auto dq = torch::zeros(q.sizes(), q.options().dtype(torch::kFloat));
    auto kv = torch::stack({k, v}).contiguous();
    // The gradient of the shard this rank holds at each step; it travels with the shard.
    auto dkv = torch::zeros(kv.sizes(), kv.options().dtype(torch::kFloat));
    for (int s = 0; s < n; ++s) {
      const int owner = (r - s + n) % n;
      const auto sh = step_shape(s, owner, r, chunk);
      const auto cut = window_cut(sh, owner, r, n, chunk, window, q.device());
      if (!cut.skip) {
        auto kb = expand_heads(kv[0].narrow(2, sh.kv_start, sh.kv_len), groups);
        auto vb = expand_heads(kv[1].narrow(2, sh.kv_start, sh.kv_len), groups);
        auto rows = [&](const torch::Tensor& t) { return t.narrow(2, sh.q_start, sh.q_len); };
        auto b = block_backward(rows(dout), rows(q), kb, vb, rows(out), rows(lse), sh.causal, scale, cut.visible);
        rows(dq).add_(b.dq.to(torch::kFloat));
        dkv[0].narrow(2, sh.kv_start, sh.kv_len).add_(fold_heads(b.dk.to(torch::kFloat), groups));
        dkv[1].narrow(2, sh.kv_start, sh.kv_len).add_(fold_heads(b.dv.to(torch::kFloat), groups));
      }
      if (s + 1 < n) kv = ring_shift(kv, g);
      // One hop more than the shards themselves: after the last step it reaches its owner.
      if (n > 1) dkv = ring_shift(dkv, g);
    }
    return {dq.to(q.scalar_type()), dkv[0].to(k.scalar_type()), dkv[1].to(v.scalar_type()), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor sliding_window_mask(int64_t len, int64_t window, const torch::Device& device) {
  auto i = torch::arange(len, torch::TensorOptions().dtype(torch::kLong).device(device)).unsqueeze(1);
  auto j = i.transpose(0, 1);
  return (j <= i).logical_and(j > i - window);
}

torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const dist::Group& group, int64_t window, double scale) {
  COLOSSAL_CHECK(window >= 0, "[sp] ring attention: sliding window ", window, " is negative");
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  COLOSSAL_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, "[sp] ring attention expects [B, H, T, D] tensors");
  COLOSSAL_CHECK(q.size(1) % k.size(1) == 0, "[sp] ring attention: ", q.size(1), " query heads do not divide by ",
                 k.size(1), " key/value heads");
  if (!group.is_member() || group.size() == 1) {
    std::optional<torch::Tensor> mask;
    if (window > 0 && q.size(2) > window) mask = sliding_window_mask(q.size(2), window, q.device());
    return at::scaled_dot_product_attention(q, k, v, mask, 0.0, /*is_causal=*/!mask, scale,
                                            /*enable_gqa=*/q.size(1) != k.size(1));
  }
  COLOSSAL_CHECK(q.size(2) % 2 == 0, "[sp] ring attention: the local sequence (", q.size(2),
                 " tokens) must be two zigzag chunks of equal length");
  return RingAttention::apply(q, k, v, hold(group), window, scale);
}

}  // namespace colossal::parallel
