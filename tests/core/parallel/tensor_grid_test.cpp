// 2D, 2.5D and 3D tensor parallelism (core/parallel/tensor/grid) against one process: a small
// network built from every grid layer (vocabulary and hidden-split embeddings, RMS and layer
// norm, column and row linear layers with biases, a padded vocabulary head, the cross entropy)
// on real ranks. Every intermediate activation gathered from the ranks' blocks, the loss, and
// every parameter's gradient gathered from its blocks equal the dense computation's (fp32,
// relative 1e-5). The bytes each rank hands to the collectives in one linear layer's forward and
// backward equal the formulas of grid_cost.h exactly (the communication profiler's counts), as do
// Megatron's 1D pair's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/runtime.h"
#include "core/parallel/tensor/grid/grid_cost.h"
#include "core/parallel/tensor/grid/grid_layers.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "core/parallel/tensor/layers.h"
#include "tests/support/comm_bytes.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::parallel {
namespace grid_test {  // named: the test sources are compiled in unity batches

namespace F = torch::nn::functional;

void expect_close(const torch::Tensor& a, const torch::Tensor& b, const std::string& what) {
  ASSERT_EQ(a.sizes(), b.sizes()) << what;
  EXPECT_TRUE(torch::allclose(a, b, 1e-5, 1e-6)) << what << ": max diff " << (a - b).abs().max().item<float>();
}

struct DenseNetwork {
  torch::Tensor E, E2, g1, W1, b1, W2, b2, g2, bn, Wh;
};

void check_network(TensorParallelMode mode, int depth) {
  auto grid = dist::is_initialized() ? TensorGrid::create(dist::world_group(), mode, depth) : TensorGrid();
  const auto& stream = grid.stream();
  const auto& inner = grid.inner();
  torch::manual_seed(11);  // the same dense tensors on every rank
  const int64_t B = 4, S = 3, H = 8, Fd = 12, V = 100;
  const int64_t Ve = padded_vocab(V, stream.row_parts()), Vh = padded_vocab(V, grid.weight_out_parts());
  DenseNetwork d;
  d.E = torch::zeros({Ve, H});
  d.E.narrow(0, 0, V).copy_(torch::randn({V, H}));
  d.E2 = torch::randn({V, H});
  d.g1 = torch::rand({H}) + 0.5;
  d.W1 = torch::randn({Fd, H}) / 3;
  d.b1 = torch::randn({Fd});
  d.W2 = torch::randn({H, Fd}) / 3;
  d.b2 = torch::randn({H});
  d.g2 = torch::rand({H}) + 0.5;
  d.bn = torch::randn({H});
  d.Wh = torch::randn({Vh, H});
  auto ids = torch::randint(V, {B, S}, torch::kLong);
  auto target = torch::randint(V, {B, S}, torch::kLong);
  target[1][2] = -100;
  target[3][0] = -100;

  // The dense network (leaves are fresh copies so their gradients are the dense gradients).
  std::vector<torch::Tensor> dense_params = {d.E, d.E2, d.g1, d.W1, d.b1, d.W2, d.b2, d.g2, d.bn, d.Wh};
  for (auto& p : dense_params) p = p.clone().requires_grad_(true);
  auto pad_mask = torch::arange(Vh).ge(V);
  auto rms = [](const torch::Tensor& x, const torch::Tensor& g) {
    return x * torch::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * g;
  };
  std::map<std::string, torch::Tensor> want;
  {
    auto& p = dense_params;
    want["embedding"] = torch::embedding(p[0], ids);
    want["hidden embedding"] = torch::embedding(p[1], ids);
    want["rms norm"] = rms(want["embedding"], p[2]);
    want["column linear"] = F::linear(want["rms norm"], p[3], p[4]);
    want["row linear"] = F::linear(torch::gelu(want["column linear"]), p[5], p[6]);
    auto residual = want["embedding"] + want["hidden embedding"] + want["row linear"];
    want["layer norm"] = F::layer_norm(residual, F::LayerNormFuncOptions({H}).weight(p[7]).bias(p[8]).eps(1e-5));
    want["logits"] = F::linear(want["layer norm"], p[9]).masked_fill(pad_mask, -INFINITY);
    want["loss"] = F::cross_entropy(want["logits"].reshape({-1, Vh}), target.reshape({-1}),
                                    F::CrossEntropyFuncOptions().ignore_index(-100));
    (want["loss"] * 3).backward();
  }

  // The grid network over this rank's blocks.
  const std::vector<GridBlock> blocks = {
      grid.embedding_block(),      grid.hidden_embedding_block(), grid.feature_block(stream),
      grid.weight_block(true),     grid.bias_block(true),         grid.weight_block(false),
      grid.bias_block(false),      grid.feature_block(stream),    grid.feature_block(stream),
      grid.weight_block(true)};
  std::vector<torch::Tensor> local;
  for (size_t i = 0; i < blocks.size(); ++i)
    local.push_back(take_block(dense_params[i].detach(), blocks[i]).requires_grad_(true));
  auto ids_here = split_activation(ids, stream, /*features=*/false);
  auto target_here = split_activation(target, inner, false);
  std::map<std::string, std::pair<torch::Tensor, const ActivationLayout*>> got;
  {
    auto& p = local;
    got["embedding"] = {grid_vocab_embedding(ids_here, p[0], stream), &stream};
    got["hidden embedding"] = {grid_embedding(ids_here, p[1], stream), &stream};
    got["rms norm"] = {grid_rms_norm(got["embedding"].first, p[2], 1e-6, stream), &stream};
    got["column linear"] = {grid_linear(got["rms norm"].first, p[3], p[4], grid.linear(true)), &inner};
    got["row linear"] = {grid_linear(torch::gelu(got["column linear"].first), p[5], p[6], grid.linear(false)),
                         &stream};
    auto residual = got["embedding"].first + got["hidden embedding"].first + got["row linear"].first;
    got["layer norm"] = {grid_layer_norm(residual, p[7], p[8], 1e-5, stream), &stream};
    got["logits"] = {mask_padded_vocab(grid_linear(got["layer norm"].first, p[9], {}, grid.linear(true)), V, inner),
                     &inner};
    auto loss = grid_cross_entropy(got["logits"].first.reshape({-1, got["logits"].first.size(-1)}),
                                   target_here.reshape({-1}), inner);
    expect_close(loss, want["loss"].detach(), "loss");
    (loss * 3).backward();
  }
  for (const auto& [name, value] : got) {
    auto whole = gather_activation(value.first, *value.second);
    if (name == "logits") {
      whole = whole.narrow(-1, 0, V);
      expect_close(whole, want[name].detach().narrow(-1, 0, V), name + " (" + grid.describe() + ")");
    } else {
      expect_close(whole, want[name].detach(), name + " (" + grid.describe() + ")");
    }
  }
  const char* names[] = {"embedding", "hidden embedding", "rms norm weight", "column weight", "column bias",
                         "row weight", "row bias", "layer norm weight", "layer norm bias", "head weight"};
  for (size_t i = 0; i < local.size(); ++i) {
    ASSERT_TRUE(local[i].grad().defined()) << names[i];
    expect_close(gather_block(local[i].grad(), blocks[i]), dense_params[i].grad(),
                 std::string(names[i]) + " gradient (" + grid.describe() + ")");
  }
}

void expect_bytes(const std::map<std::string, int64_t>& got, const CollectiveBytes& want, const std::string& what) {
  const std::map<std::string, int64_t> expected = {
      {"all_gather", want.all_gather}, {"reduce_scatter", want.reduce_scatter}, {"all_reduce", want.all_reduce}};
  for (const auto& [op, bytes] : expected) {
    auto it = got.find(op);
    EXPECT_EQ(it == got.end() ? 0 : it->second, bytes) << op << " bytes of " << what;
  }
  for (const auto& [op, bytes] : got)
    EXPECT_TRUE(expected.count(op)) << "unexpected " << op << " (" << bytes << " bytes) in " << what;
}

void check_linear_bytes(TensorParallelMode mode, int depth) {
  auto grid = TensorGrid::create(dist::world_group(), mode, depth);
  const int64_t B = 8, S = 5, K = 16, N = 24;
  for (bool column : {true, false}) {
    const auto& comm = grid.linear(column);
    auto x = torch::randn({B / comm.in.row_parts(), S, K / comm.in.feature_parts()}).requires_grad_(true);
    auto w = take_block(torch::randn({N, K}), grid.weight_block(column)).requires_grad_(true);
    auto b = take_block(torch::randn({N}), grid.bias_block(column)).requires_grad_(true);
    auto got = testing::collective_bytes([&] { grid_linear(x, w, b, comm).sum().backward(); });
    const LinearShape shape{.tokens = B * S, .in = K, .out = N, .bias = true, .column = column};
    expect_bytes(got, linear_collective_bytes(mode, grid.q(), grid.depth(), shape, 4),
                 std::string(column ? "a column" : "a row") + " layer on the " + grid.describe());
  }
}

// Megatron's pair for comparison: the column layer's input gradient and the row layer's output
// all-reduced.
void check_megatron_bytes() {
  ParallelContext ctx;
  ctx.tp = dist::world_group();
  const int64_t B = 8, S = 5, K = 16, N = 24, tp = ctx.tp_size();
  ParallelLinear column(ParallelLinearOptions{.in_features = K, .out_features = N, .style = SplitStyle::kColumn}, ctx);
  ParallelLinear row(ParallelLinearOptions{.in_features = N, .out_features = K, .style = SplitStyle::kRow}, ctx);
  auto x = torch::randn({B, S, K}).requires_grad_(true);
  auto got = testing::collective_bytes(
      [&] { row->forward(column->forward(enter_tensor_parallel(x, ctx))).sum().backward(); });
  auto want = linear_collective_bytes(TensorParallelMode::k1d, static_cast<int>(tp), 1,
                                      {.tokens = B * S, .in = K, .out = N, .column = true}, 4);
  want += linear_collective_bytes(TensorParallelMode::k1d, static_cast<int>(tp), 1,
                                  {.tokens = B * S, .in = N, .out = K, .column = false}, 4);
  expect_bytes(got, want, "Megatron's column and row pair on tp " + std::to_string(tp));
}

TEST(TensorGrid, EveryModeOnOneProcessIsTheDenseNetwork) {
  check_network(TensorParallelMode::k2d, 1);  // a default grid: every group absent
  testing::run_ranks(1, [] {
    check_network(TensorParallelMode::k2d, 1);
    check_network(TensorParallelMode::k2p5d, 1);
    check_network(TensorParallelMode::k3d, 1);
  });
}

TEST(TensorGrid, TwoDimensionalOnFourRanks) {
  testing::run_ranks(4, [] {
    check_network(TensorParallelMode::k2d, 1);
    check_linear_bytes(TensorParallelMode::k2d, 1);
    check_megatron_bytes();
  });
}

TEST(TensorGrid, TwoAndAHalfDimensionalOnFourAndEightRanks) {
  testing::run_ranks(4, [] {  // q = 1: the depth alone
    check_network(TensorParallelMode::k2p5d, 4);
    check_linear_bytes(TensorParallelMode::k2p5d, 4);
  });
  testing::run_ranks(8, [] {
    check_network(TensorParallelMode::k2p5d, 2);
    check_linear_bytes(TensorParallelMode::k2p5d, 2);
  });
}

TEST(TensorGrid, ThreeDimensionalOnEightRanks) {
  testing::run_ranks(8, [] {
    check_network(TensorParallelMode::k3d, 1);
    check_linear_bytes(TensorParallelMode::k3d, 1);
  });
}

// --mixed_precision fp8 on a grid: a grid of one is amp::fp8_linear exactly (output and both
// gradients); on a 2x2 grid each rank's gathered blocks carry their own scales, so the product is
// not the one-process FP8 product but stays within FP8's bound of the fp32 one: each term's
// operands round by at most 2^-4 (e4m3), so |y - x W^T| <= ~2 x 2^-4 x (|x| |W|^T).
void check_fp8_linear(TensorParallelMode mode) {
  auto grid = dist::is_initialized() ? TensorGrid::create(dist::world_group(), mode) : TensorGrid();
  torch::manual_seed(5);
  auto x = torch::randn({4, 3, 8}), w = torch::randn({12, 8});
  auto state = std::make_shared<amp::Fp8LinearState>();
  const auto& comm = grid.linear(/*column=*/true);
  auto xb = split_activation(x, comm.in).requires_grad_(true);
  auto wb = take_block(w, grid.weight_block(true)).requires_grad_(true);
  auto y = grid_linear(xb, wb, {}, comm, state);
  y.sum().backward();
  auto whole = gather_activation(y, comm.out);
  if (!grid.parallel()) {
    auto xr = x.clone().requires_grad_(true), wr = w.clone().requires_grad_(true);
    auto ref = amp::fp8_linear(xr, wr, {}, std::make_shared<amp::Fp8LinearState>());
    ref.sum().backward();
    EXPECT_TRUE(torch::equal(whole, ref));
    EXPECT_TRUE(torch::equal(xb.grad(), xr.grad()));
    EXPECT_TRUE(torch::equal(wb.grad(), wr.grad()));
    return;
  }
  auto exact = torch::matmul(x, w.t());
  auto allowed = torch::matmul(x.abs(), w.abs().t()) * (2 * std::ldexp(1.0, -4) + std::ldexp(1.0, -8));
  EXPECT_TRUE(torch::all((whole - exact).abs() <= allowed).item<bool>());
  EXPECT_FALSE(torch::equal(whole, exact)) << "nothing went through FP8";
}

TEST(TensorGrid, Fp8ProductsOnTheGrid) {
  check_fp8_linear(TensorParallelMode::k2d);
  testing::run_ranks(4, [] { check_fp8_linear(TensorParallelMode::k2d); });
}

TEST(TensorGrid, ShapesThatDoNotFitTheGridAreNamed) {
  using dist::tensor_grid_shape;
  EXPECT_EQ(tensor_grid_shape(TensorParallelMode::k2d, 9).q, 3);
  EXPECT_EQ(tensor_grid_shape(TensorParallelMode::k3d, 27).q, 3);
  EXPECT_EQ(tensor_grid_shape(TensorParallelMode::k2p5d, 8, 2).q, 2);
  testing::expect_error_mentions([] { tensor_grid_shape(TensorParallelMode::k2d, 6); }, {"2d", "tp 6", "not a square"});
  testing::expect_error_mentions([] { tensor_grid_shape(TensorParallelMode::k3d, 4); }, {"3d", "tp 4", "not a cube"});
  testing::expect_error_mentions([] { tensor_grid_shape(TensorParallelMode::k2p5d, 8, 3); },
                                 {"tp 8", "tp_depth 3"});
  testing::expect_error_mentions([] { tensor_grid_shape(TensorParallelMode::k2p5d, 12, 2); },
                                 {"12 / tp_depth 2 = 6", "not a square"});
  testing::expect_error_mentions([] { tensor_grid_shape(TensorParallelMode::k2d, 4, 2); }, {"tp_depth 2", "2.5d"});
  testing::expect_error_mentions([] { dist::parse_tensor_parallel_mode("4d"); }, {"tp_mode '4d'", "2.5d"});
  dist::ParallelDims::Options o;
  o.tp = 4;
  o.tp_mode = "2d";
  o.sp_mode = "split_gather";
  testing::expect_error_mentions([&] { o.validate(); }, {"split_gather", "tp_mode 2d"});
  testing::run_ranks(4, [] {
    auto grid = TensorGrid::create(dist::world_group(), TensorParallelMode::k2d);
    // A hidden size of 6 cut into 2 feature blocks of 3 cannot meet a weight of 4 input features.
    auto x = torch::randn({2, 3, 3});
    auto w = torch::randn({4, 2});
    testing::expect_error_mentions([&] { grid_linear(x, w, {}, grid.linear(true)); },
                                   {"grid_linear", "6 features", "[4, 2]"});
    testing::expect_error_mentions([&] { split_activation(torch::zeros({3, 4}), grid.stream()); },
                                   {"batch of 3", "2 row blocks"});
    testing::expect_error_mentions([&] { take_block(torch::zeros({6, 5}), grid.weight_block(true)); },
                                   {"dimension 1", "2 grid blocks"});
  });
}

}  // namespace grid_test
}  // namespace colossal::parallel
