// The tensor-parallel layer family (ParallelLinear, ParallelEmbedding and the vocab-parallel
// cross entropy) against the dense versions on 1, 2 and 4 real ranks: forward outputs, and each
// rank's gradients against the matching slice of the dense gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/runtime.h"
#include "core/parallel/tensor/comm_ops.h"
#include "core/parallel/tensor/layers.h"
#include "core/parallel/tensor/parallel_embedding.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "tests/support/multirank.h"

namespace colossal::parallel {
namespace {

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const char* what) {
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << what << ": max diff " << (a - b).abs().max().item<float>();
}

ParallelLinear linear(int64_t in, int64_t out, SplitStyle style, const ParallelContext& ctx, bool bias = false,
                      bool gather_output = false) {
  return ParallelLinear(ParallelLinearOptions{.in_features = in, .out_features = out, .bias = bias, .style = style,
                                              .gather_output = gather_output},
                        ctx);
}

void check_layers() {
  auto g = dist::world_group();
  const int tp = g.size(), r = g.rank();
  ParallelContext ctx;
  ctx.tp = g;
  torch::manual_seed(7);  // the same dense tensors on every rank
  const int64_t in = 8, out = 12, B = 3;
  auto W = torch::randn({out, in}), bias = torch::randn({out}), X = torch::randn({B, 5, in});
  auto R = torch::randn({B, 5, out});  // fixed upstream gradient

  // Column-parallel, gathered output.
  {
    auto x = X.clone().requires_grad_(true);
    auto w = W.clone().requires_grad_(true), b = bias.clone().requires_grad_(true);
    auto dense = torch::nn::functional::linear(x, w, b);
    (dense * R).sum().backward();
    auto col = linear(in, out, SplitStyle::kColumn, ctx, /*bias=*/true, /*gather_output=*/true);
    const int64_t part = out / tp;
    {
      torch::NoGradGuard ng;
      col->weight.copy_(W.narrow(0, r * part, part));
      col->bias.copy_(bias.narrow(0, r * part, part));
    }
    auto xt = X.clone().requires_grad_(true);
    auto y = col->forward(enter_tensor_parallel(xt, ctx));  // column input: gradient all-reduced
    expect_close(y, dense.detach(), "column output");
    (y * R).sum().backward();
    expect_close(xt.grad(), x.grad(), "column input gradient");
    expect_close(col->weight.grad(), w.grad().narrow(0, r * part, part), "column weight gradient");
    expect_close(col->bias.grad(), b.grad().narrow(0, r * part, part), "column bias gradient");
  }
  // Column (split output) into row-parallel: the Megatron MLP pair equals the dense pair.
  {
    auto W2 = torch::randn({in, out});
    auto x = X.clone().requires_grad_(true);
    auto w1 = W.clone().requires_grad_(true), w2 = W2.clone().requires_grad_(true);
    auto dense = torch::nn::functional::linear(torch::gelu(torch::nn::functional::linear(x, w1)), w2);
    auto R2 = torch::randn_like(dense);
    (dense * R2).sum().backward();
    auto col = linear(in, out, SplitStyle::kColumn, ctx);
    auto row = linear(out, in, SplitStyle::kRow, ctx);
    const int64_t part = out / tp;
    {
      torch::NoGradGuard ng;
      col->weight.copy_(W.narrow(0, r * part, part));
      row->weight.copy_(W2.narrow(1, r * part, part));
    }
    auto xt = X.clone().requires_grad_(true);
    auto y = row->forward(torch::gelu(col->forward(enter_tensor_parallel(xt, ctx))));
    expect_close(y, dense.detach(), "column+row output");
    (y * R2).sum().backward();
    expect_close(xt.grad(), x.grad(), "column+row input gradient");
    expect_close(col->weight.grad(), w1.grad().narrow(0, r * part, part), "column weight gradient");
    expect_close(row->weight.grad(), w2.grad().narrow(1, r * part, part), "row weight gradient");
  }
  // Vocab-parallel embedding (vocabulary 100, padded to a multiple of 64 x tp).
  {
    const int64_t vocab = 100, dim = 6, padded = padded_vocab(vocab, tp);
    EXPECT_EQ(padded % (64 * tp), 0);
    auto E = torch::zeros({padded, dim});
    E.narrow(0, 0, vocab).copy_(torch::randn({vocab, dim}));
    auto ids = torch::randint(vocab, {4, 7}, torch::kLong);
    auto e = E.clone().requires_grad_(true);
    auto dense = torch::embedding(e, ids);
    auto R3 = torch::randn_like(dense);
    (dense * R3).sum().backward();
    ParallelEmbedding emb(vocab, dim, ctx);
    const int64_t part = emb->weight.size(0);
    {
      torch::NoGradGuard ng;
      emb->weight.copy_(E.narrow(0, r * part, part));  // one rank: the unpadded table
    }
    auto y = emb->forward(ids);
    expect_close(y, dense.detach(), "embedding output");
    (y * R3).sum().backward();
    expect_close(emb->weight.grad(), e.grad().narrow(0, r * part, part), "embedding gradient");
  }
  // Vocab-parallel cross entropy, with ignored targets.
  {
    const int64_t vocab = 64 * tp, n = 9, part = vocab / tp;
    auto L = torch::randn({n, vocab}) * 3;
    auto target = torch::randint(vocab, {n}, torch::kLong);
    target[2] = -100;
    auto l = L.clone().requires_grad_(true);
    auto dense = torch::nn::functional::cross_entropy(
        l, target, torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    (dense * 2).backward();
    auto lt = L.narrow(1, r * part, part).clone().requires_grad_(true);
    auto loss = vocab_parallel_cross_entropy(lt, target, g);
    expect_close(loss, dense.detach(), "cross entropy");
    (loss * 2).backward();
    expect_close(lt.grad(), l.grad().narrow(1, r * part, part), "cross entropy gradient");
  }
  // gather and split are inverses, and their gradients too.
  {
    auto full = torch::arange(2 * 4 * tp, torch::kFloat).view({2, 4 * tp}).requires_grad_(true);
    auto mine = split_last_dim(full, g);
    EXPECT_TRUE(torch::equal(mine, full.detach().narrow(1, r * 4, 4)));
    auto back = gather_last_dim(mine, g);
    EXPECT_TRUE(torch::equal(back, full.detach()));
    back.sum().backward();
    // split then gather is the identity, so is its backward (slice, then gather the slices).
    EXPECT_TRUE(torch::equal(full.grad(), torch::ones_like(full))) << full.grad();
  }
}

TEST(TensorParallel, LayersMatchDenseOnTwoRanks) { testing::run_ranks(2, check_layers); }
TEST(TensorParallel, LayersMatchDenseOnFourRanks) { testing::run_ranks(4, check_layers); }
TEST(TensorParallel, LayersMatchDenseOnOneRank) { testing::run_ranks(1, check_layers); }

}  // namespace
}  // namespace colossal::parallel
