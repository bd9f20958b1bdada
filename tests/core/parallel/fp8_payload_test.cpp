// FP8 payloads (--fp8_communication, core/parallel/fp8_payload.h): the packed rows against LibTorch's
// float8 casts (saturation, NaN, zero rows), every value back within the format's rounding bound,
// and on real ranks: the all-gather moves half of bf16's bytes plus one scale per vector of the
// last dimension (the communication profiler's counts), the all-to-all (uneven rows) and
// pipeline sends carry FP8 on a tagged handle only, and the autograd exchanges (sequence gather,
// Ulysses) keep their gradients within the e5m2 bound.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/fp8_payload.h"
#include "core/parallel/gather_along.h"
#include "core/parallel/pipeline/p2p.h"
#include "core/parallel/sequence/sequence_ops.h"
#include "core/parallel/tensor/comm_ops.h"
#include "tests/support/comm_bytes.h"
#include "tests/support/multirank.h"

namespace colossal::parallel {
namespace fp8_payload_test {  // named: the test sources are compiled in unity batches

using amp::Fp8Format;

// The rounding bound of a value that went through FP8 under a row scale: half an ulp of the format
// (2^-4 relative for e4m3's 3 mantissa bits, 2^-3 for e5m2's 2) for normal values, half the
// smallest subnormal step below them (2^-10 and 2^-17 before the scale).
torch::Tensor bound(const torch::Tensor& x, Fp8Format f, const torch::Tensor& row_scale) {
  const double rel = f == Fp8Format::kE4M3 ? std::ldexp(1.0, -4) : std::ldexp(1.0, -3);
  const double floor = f == Fp8Format::kE4M3 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -17);
  return x.abs() * rel + floor / row_scale;
}

// Each row of `got` within the bound of the same row of `x` (fp32), under the row's own amax.
void expect_within_fp8(const torch::Tensor& got, const torch::Tensor& x, Fp8Format f, const std::string& what,
                       double extra_relative = 0) {
  ASSERT_EQ(got.sizes(), x.sizes()) << what;
  auto xf = x.to(torch::kFloat).reshape({x.size(0), -1});
  auto gf = got.to(torch::kFloat).reshape({x.size(0), -1});
  auto scale = amp::fp8_max(f) / xf.abs().amax(1, true).clamp_min(1e-30);
  auto err = (gf - xf).abs();
  auto allowed = bound(xf, f, scale) + xf.abs() * extra_relative;
  EXPECT_TRUE(torch::all(err <= allowed).item<bool>())
      << what << ": largest error over the bound " << (err - allowed).max().item<double>();
  EXPECT_GT(err.max().item<double>(), 0.0) << what << ": exact, so nothing went through FP8";
}

TEST(Fp8Payload, RowsMatchTheFloat8CastAndStayWithinTheRoundingBound) {
  torch::manual_seed(3);
  // Rows six orders of magnitude apart: each row has its own scale, so each keeps its precision.
  auto x = torch::randn({4, 33}) * torch::tensor({1e-4, 1.0, 3e2, 1e5}).unsqueeze(1);
  for (Fp8Format f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    auto bytes = pack_fp8_rows(x, f);
    ASSERT_EQ(bytes.sizes(), (c10::IntArrayRef{4, 33 + kFp8ScaleBytes}));
    ASSERT_EQ(bytes.scalar_type(), torch::kByte);
    auto back = unpack_fp8_rows(bytes, f, torch::kFloat);
    expect_within_fp8(back, x, f, amp::to_string(f));
    for (int64_t r = 0; r < 4; ++r) {  // the float8 reference: amp's quantizer on the row alone
      auto ref = amp::quantize_fp8(x[r], f).dequantize();
      EXPECT_TRUE(torch::equal(back[r], ref)) << amp::to_string(f) << " row " << r;
    }
  }
  // The dtype comes back; shapes beyond two dimensions are rows of their flattened rest.
  auto b = torch::randn({3, 2, 5}).to(torch::kBFloat16);
  auto back = unpack_fp8_rows(pack_fp8_rows(b, Fp8Format::kE4M3), Fp8Format::kE4M3, torch::kBFloat16);
  EXPECT_EQ(back.scalar_type(), torch::kBFloat16);
  expect_within_fp8(back.reshape({3, 2, 5}), b, Fp8Format::kE4M3, "bf16", std::ldexp(1.0, -8));
}

TEST(Fp8Payload, SaturatesKeepsNaNAndZeroRows) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto x = torch::tensor({{1.0f, -2.0f, inf, -inf, nan}, {0.0f, 0.0f, 0.0f, 0.0f, 0.0f}});
  auto back = unpack_fp8_rows(pack_fp8_rows(x, Fp8Format::kE4M3), Fp8Format::kE4M3, torch::kFloat);
  // The scale comes from the finite values (amax 2): infinities saturate to the largest value.
  EXPECT_FLOAT_EQ(back[0][0].item<float>(), 1.0f);
  EXPECT_FLOAT_EQ(back[0][1].item<float>(), -2.0f);
  EXPECT_FLOAT_EQ(back[0][2].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(back[0][3].item<float>(), -2.0f);
  EXPECT_TRUE(std::isnan(back[0][4].item<float>()));
  EXPECT_TRUE(torch::equal(back[1], torch::zeros({5})));
  // Empty tensors pack to their scales only.
  EXPECT_EQ(pack_fp8_rows(torch::zeros({2, 0}), Fp8Format::kE5M2).sizes(), (c10::IntArrayRef{2, kFp8ScaleBytes}));
  EXPECT_EQ(pack_fp8_rows(torch::zeros({0, 7}), Fp8Format::kE5M2).sizes(), (c10::IntArrayRef{0, 7 + kFp8ScaleBytes}));
}

TEST(Fp8Payload, EachVectorOfTheLastDimensionHasItsOwnScale) {
  // One token 10^6 times larger than the others: with a scale for the whole tensor the small
  // tokens fall below FP8's subnormals (flushed to zero); each token's own scale keeps them
  // within 2^-4.
  torch::manual_seed(9);
  auto x = torch::randn({2, 3, 16});
  x[1][2] *= 1e6;
  auto bytes = pack_fp8(x, Fp8Format::kE4M3);
  EXPECT_EQ(bytes.sizes(), (c10::IntArrayRef{2, 3 * (16 + kFp8ScaleBytes)}));
  EXPECT_EQ(fp8_row_bytes(x.sizes()), 3 * (16 + kFp8ScaleBytes));
  auto back = unpack_fp8(bytes, x.sizes(), Fp8Format::kE4M3, torch::kFloat);
  expect_within_fp8(back.reshape({6, 16}), x.reshape({6, 16}), Fp8Format::kE4M3, "per-token scales");
  auto whole = unpack_fp8_rows(pack_fp8_rows(x.reshape({1, -1}), Fp8Format::kE4M3), Fp8Format::kE4M3, torch::kFloat);
  const double per_token = (back - x).abs().narrow(0, 0, 1).mean().item<double>();
  const double per_tensor = (whole.reshape(x.sizes()) - x).abs().narrow(0, 0, 1).mean().item<double>();
  EXPECT_LT(per_token * 10, per_tensor) << "the small tokens' error under one scale for the whole tensor";
  EXPECT_THROW(unpack_fp8(bytes, {2, 3, 15}, Fp8Format::kE4M3, torch::kFloat), c10::Error);
}

TEST(MultiRankFp8Payload, AllGatherMovesHalfOfBf16sBytesWithinTheBound) {
  testing::run_ranks(4, [] {
    const auto& world = dist::world_group();
    const auto tagged = world.with_fp8_payloads();
    torch::manual_seed(100 + world.rank());
    auto x = (torch::randn({6, 10}) * (world.rank() + 1)).to(torch::kBFloat16);
    torch::Tensor exact, fp8;
    const auto exact_bytes =
        testing::collective_bytes([&] { exact = all_gather_along_payload(x, 0, world, Fp8Format::kE4M3); });
    const auto fp8_bytes =
        testing::collective_bytes([&] { fp8 = all_gather_along_payload(x, 0, tagged, Fp8Format::kE4M3); });
    EXPECT_EQ(exact_bytes.at("all_gather"), 4 * 60 * 2);
    // Half of bf16's bytes, plus a 4-byte scale for each of the 4 x 6 vectors of 10 values.
    EXPECT_EQ(fp8_bytes.at("all_gather"), exact_bytes.at("all_gather") / 2 + 4 * 6 * kFp8ScaleBytes);
    EXPECT_EQ(fp8.scalar_type(), torch::kBFloat16);
    // Each vector within the bound of its own amax (and bf16's rounding).
    expect_within_fp8(fp8, exact, Fp8Format::kE4M3, "all_gather", std::ldexp(1.0, -8));
    // Along another dimension, as the layers gather features.
    auto last = all_gather_along_payload(x, -1, tagged, Fp8Format::kE4M3);
    EXPECT_EQ(last.sizes(), (c10::IntArrayRef{6, 40}));
    EXPECT_TRUE(torch::allclose(last.to(torch::kFloat), all_gather_along(x, -1, world).to(torch::kFloat), 0.07, 1e-3));
  });
}

TEST(MultiRankFp8Payload, AllToAllRowsWithUnevenSplits) {
  testing::run_ranks(3, [] {
    const auto& world = dist::world_group();
    const int r = world.rank();
    // Rank r sends k + r + 1 rows to rank k, each row at its own magnitude.
    std::vector<int64_t> send, recv;
    for (int k = 0; k < 3; ++k) {
      send.push_back(k + r + 1);
      recv.push_back(r + k + 1);
    }
    torch::manual_seed(7 + r);
    const int64_t rows = std::accumulate(send.begin(), send.end(), int64_t{0});
    auto x = torch::randn({rows, 2, 8}) * torch::logspace(-3, 3, rows).reshape({rows, 1, 1});
    torch::Tensor exact, fp8;
    const auto exact_bytes =
        testing::collective_bytes([&] { exact = all_to_all_rows_payload(x, world, Fp8Format::kE5M2, recv, send); });
    const auto fp8_bytes = testing::collective_bytes(
        [&] { fp8 = all_to_all_rows_payload(x, world.with_fp8_payloads(), Fp8Format::kE5M2, recv, send); });
    EXPECT_EQ(exact_bytes.at("all_to_all"), rows * 16 * 4);
    EXPECT_EQ(fp8_bytes.at("all_to_all"), rows * 2 * (8 + kFp8ScaleBytes));  // two vectors of 8 a row
    expect_within_fp8(fp8.reshape({-1, 8}), exact.reshape({-1, 8}), Fp8Format::kE5M2, "all_to_all");
  });
}

TEST(MultiRankFp8Payload, PipelineSendsAndAutogradExchanges) {
  testing::run_ranks(2, [] {
    const auto& world = dist::world_group();
    const auto tagged = world.with_fp8_payloads();
    const int r = world.rank();
    // A pipeline activation (e4m3) and its gradient (e5m2) between two stages.
    {
      torch::manual_seed(5);
      auto act = torch::randn({2, 3, 16}).to(torch::kBFloat16);
      auto grad = torch::randn({2, 3, 16}) * 1e-3;
      pipeline::StageLink link(tagged);
      const pipeline::Channel fwd{1, pipeline::Direction::kForward, 0}, bwd{0, pipeline::Direction::kBackward, 0};
      const auto bytes = testing::collective_bytes([&] {
        if (r == 0) {
          link.send(act, 1, fwd);
          link.wait_sends();
          expect_within_fp8(link.recv(1, bwd).reshape({6, 16}), grad.reshape({6, 16}), Fp8Format::kE5M2, "gradient");
        } else {
          auto got = link.recv(0, fwd);
          EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
          expect_within_fp8(got.reshape({6, 16}), act.reshape({6, 16}), Fp8Format::kE4M3, "activation",
                            std::ldexp(1.0, -8));
          link.send(grad, 0, bwd);
          link.wait_sends();
        }
      });
      // Each end sends and receives one header (10 int64: dtype, rank, 8 sizes) and one FP8 message
      // of 6 tokens of 16 values with their scales (bf16 would be 192 bytes, the fp32 gradient 384).
      EXPECT_EQ(bytes.at("send"), 80 + 6 * (16 + kFp8ScaleBytes));
      EXPECT_EQ(bytes.at("recv"), 80 + 6 * (16 + kFp8ScaleBytes));
    }
    // Sequence-parallel gather (forward FP8, backward reduce-scatter exact) against the exact op.
    {
      torch::manual_seed(11 + r);
      auto x = torch::randn({2, 3, 8}, torch::requires_grad());
      auto upstream = torch::randn({2, 6, 8});
      auto exact = gather_along_dim(x, 1, world);
      exact.backward(upstream);
      auto exact_grad = x.grad().clone();
      x.mutable_grad().reset();
      auto fp8 = gather_along_dim(x, 1, tagged);
      fp8.backward(upstream);
      expect_within_fp8(fp8.reshape({-1, 8}), exact.reshape({-1, 8}), Fp8Format::kE4M3, "gathered sequence");
      EXPECT_TRUE(torch::equal(x.grad(), exact_grad)) << "the backward reduce-scatter stays exact";
    }
    // Ulysses: both directions of the all-to-all through FP8 (e4m3 forward, e5m2 backward).
    {
      torch::manual_seed(21 + r);
      auto x = torch::randn({1, 4, 2, 8}, torch::requires_grad());  // [B, T/n, H, D]
      auto upstream = torch::randn({1, 8, 1, 8});
      auto exact = sequence_to_heads(x, world);
      exact.backward(upstream);
      auto exact_grad = x.grad().clone();
      x.mutable_grad().reset();
      auto fp8 = sequence_to_heads(x, tagged);
      fp8.backward(upstream);
      EXPECT_TRUE(torch::allclose(fp8, exact, 0.07, 1e-3)) << (fp8 - exact).abs().max().item<float>();
      EXPECT_FALSE(torch::equal(fp8, exact)) << "nothing went through FP8";
      EXPECT_TRUE(torch::allclose(x.grad(), exact_grad, 0.13, 1e-3))
          << (x.grad() - exact_grad).abs().max().item<float>();
      EXPECT_FALSE(torch::equal(x.grad(), exact_grad)) << "the gradient's exchange went through FP8";
    }
  });
}

}  // namespace fp8_payload_test
}  // namespace colossal::parallel
