// Sequence-parallel building blocks against their dense versions on 2 and 4 real ranks: ring
// attention (zigzag shards, grouped-query heads) and the Ulysses head exchange give the dense
// causal attention's output, and each rank's q/k/v gradients equal the rows of the dense
// gradients it holds; the split_gather gather/reduce-scatter pair is checked the same way.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/runtime.h"
#include "core/parallel/sequence/layout.h"
#include "core/parallel/sequence/ring_attention.h"
#include "core/parallel/sequence/sequence_ops.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::parallel {
namespace {

void expect_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  const double scale = want.abs().max().item<double>();
  EXPECT_LE((got - want).abs().max().item<double>(), 1e-5 * scale + 1e-7) << what;
}

struct Dense {
  torch::Tensor out, dq, dk, dv;
};

// Causal attention over the whole sequence in [B, T, H, D] layout, with its q/k/v gradients for
// the upstream gradient R. A sliding window as a mask built here by hand (query i sees keys j
// with i - window < j <= i).
Dense dense_attention(const torch::Tensor& Q, const torch::Tensor& K, const torch::Tensor& V, const torch::Tensor& R,
                      int64_t window = 0) {
  auto q = Q.clone().requires_grad_(true), k = K.clone().requires_grad_(true), v = V.clone().requires_grad_(true);
  const int64_t T = Q.size(1);
  auto mask = torch::zeros({T, T}, torch::kBool);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j <= i; ++j) mask[i][j] = window == 0 || j > i - window;
  auto out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask, 0.0,
                                              false, std::nullopt, Q.size(2) != K.size(2))
                 .transpose(1, 2);
  (out * R).sum().backward();
  return {out.detach(), q.grad(), k.grad(), v.grad()};
}

void check_attention(SequenceParallelMode mode, int64_t window = 0) {
  ParallelContext ctx;
  ctx.sp = dist::world_group();
  ctx.sp_mode = mode;
  torch::manual_seed(3);  // the same dense tensors on every rank
  const int64_t B = 2, T = 16, H = 4, KV = 2, D = 8;
  auto Q = torch::randn({B, T, H, D}), K = torch::randn({B, T, KV, D}), V = torch::randn({B, T, KV, D});
  auto R = torch::randn({B, T, H, D});
  auto want = dense_attention(Q, K, V, R, window);

  auto q = take_local(Q, ctx).requires_grad_(true);
  auto k = take_local(K, ctx).requires_grad_(true);
  auto v = take_local(V, ctx).requires_grad_(true);
  torch::Tensor out;
  if (mode == SequenceParallelMode::kRingAttn) {
    out = ring_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), ctx.sp, window).transpose(1, 2);
  } else {
    // Ulysses with kv heads copied per query head when sp does not divide them.
    auto kk = k, vv = v;
    if (KV % ctx.sp.size() != 0) kk = k.repeat_interleave(H / KV, 2), vv = v.repeat_interleave(H / KV, 2);
    auto qh = sequence_to_heads(q, ctx.sp), kh = sequence_to_heads(kk, ctx.sp), vh = sequence_to_heads(vv, ctx.sp);
    out = heads_to_sequence(at::scaled_dot_product_attention(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2),
                                                             {}, 0.0, true, std::nullopt, kh.size(2) != qh.size(2))
                                .transpose(1, 2),
                            ctx.sp);
  }
  (out * take_local(R, ctx)).sum().backward();
  const std::string what = std::string(to_string(mode)) + " sp=" + std::to_string(ctx.sp.size()) +
                           " window=" + std::to_string(window);
  expect_close(out, take_local(want.out, ctx), what + ": output");
  expect_close(q.grad(), take_local(want.dq, ctx), what + ": dq");
  expect_close(k.grad(), take_local(want.dk, ctx), what + ": dk");
  expect_close(v.grad(), take_local(want.dv, ctx), what + ": dv");
  // And the shards put back together are the whole output.
  expect_close(gather_local(out.detach(), ctx), want.out, what + ": gathered output");
}

void check_split_gather() {
  auto g = dist::world_group();
  ParallelContext ctx;
  ctx.tp = g;
  ctx.sp_mode = SequenceParallelMode::kSplitGather;
  torch::manual_seed(4);
  const int64_t B = 2, T = 8, H = 6;
  auto X = torch::randn({B, T, H}), W = torch::randn({H, H}), R = torch::randn({B, T, H});
  // Every rank applies the same W to the gathered sequence and the reduce-scatter sums the n
  // copies, so the dense counterpart is n x W.
  auto x = X.clone().requires_grad_(true);
  auto y = torch::nn::functional::linear(x, W) * static_cast<double>(g.size());
  (y * R).sum().backward();
  auto xs = take_local(X, ctx).requires_grad_(true);  // contiguous shard
  auto full = gather_sequence(xs, g);
  auto ys = reduce_scatter_sequence(torch::nn::functional::linear(full, W), g);
  (ys * take_local(R, ctx)).sum().backward();
  expect_close(ys, take_local(y.detach(), ctx), "split_gather output");
  expect_close(xs.grad(), take_local(x.grad(), ctx), "split_gather input gradient");
}

TEST(SequenceParallelOps, RingAttentionMatchesDenseOnTwoRanks) {
  testing::run_ranks(2, [] { check_attention(SequenceParallelMode::kRingAttn); });
}
TEST(SequenceParallelOps, RingAttentionMatchesDenseOnFourRanks) {
  testing::run_ranks(4, [] { check_attention(SequenceParallelMode::kRingAttn); });
}
// Windows shorter than a zigzag chunk, spanning a few, and longer than the sequence (T = 16:
// chunks of 4 on 2 ranks, of 2 on 4), so shards are skipped, cut and taken whole.
TEST(SequenceParallelOps, RingAttentionWithASlidingWindowMatchesItsMask) {
  for (int64_t window : {2, 3, 6, 11, 40}) {
    testing::run_ranks(2, [window] { check_attention(SequenceParallelMode::kRingAttn, window); });
    testing::run_ranks(4, [window] { check_attention(SequenceParallelMode::kRingAttn, window); });
  }
}
TEST(SequenceParallelOps, UlyssesMatchesDenseOnTwoAndFourRanks) {
  testing::run_ranks(2, [] { check_attention(SequenceParallelMode::kAllToAll); });
  testing::run_ranks(4, [] { check_attention(SequenceParallelMode::kAllToAll); });
}
TEST(SequenceParallelOps, GatherAndReduceScatterMatchDense) {
  testing::run_ranks(2, check_split_gather);
  testing::run_ranks(4, check_split_gather);
}

TEST(SequenceParallelOps, LayoutsCoverTheSequenceOnce) {
  for (auto mode : {SequenceParallelMode::kAllToAll, SequenceParallelMode::kRingAttn}) {
    for (int n : {2, 4}) {
      std::vector<torch::Tensor> all;
      for (int r = 0; r < n; ++r) all.push_back(sequence_positions(16, mode, r, n));
      auto sorted = std::get<0>(torch::cat(all).sort());
      EXPECT_TRUE(torch::equal(sorted, torch::arange(16))) << to_string(mode) << " n=" << n;
    }
  }
  // Zigzag: rank 0 of 2 holds chunks 0 and 3 of 4.
  EXPECT_TRUE(torch::equal(sequence_positions(8, SequenceParallelMode::kRingAttn, 0, 2),
                           torch::tensor({0, 1, 6, 7}, torch::kInt64)));
  ParallelContext ctx;  // a lone rank: whole sequence
  EXPECT_TRUE(torch::equal(local_positions(5, ctx), torch::arange(5)));
}

}  // namespace
}  // namespace colossal::parallel
