// FP8 (core/amp/fp8.h, fp8_linear.h): the quantizer against LibTorch's float8 dtypes with
// saturation, NaN and infinities; current and delayed scaling; the FP8 linear layer's output and
// gradients against the same math on the dequantized FP8 values (exact), and against fp32 within
// the formats' rounding; a layer switched to FP8 through ParallelLinear.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/amp/fp8.h"
#include "core/amp/fp8_linear.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "tests/support/errors.h"

namespace colossal::amp {
namespace fp8_test {  // named: the test sources are compiled in unity batches

// Every finite value of a format, from its 256 bit patterns.
torch::Tensor all_finite_values(Fp8Format f) {
  auto codes = torch::arange(256, torch::kInt32).to(torch::kUInt8);
  auto values = codes.view(fp8_dtype(f)).to(torch::kFloat);
  return values.masked_select(values.isfinite());
}

TEST(Fp8, QuantizerIsTheFloat8CastWithSaturationAndNaNKept) {
  for (auto f : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const double max = fp8_max(f);
    auto values = all_finite_values(f);
    EXPECT_EQ(values.abs().max().item<double>(), max) << to_string(f);
    // Representable values come back exactly at scale 1.
    EXPECT_TRUE(torch::equal(quantize_fp8(values, f, 1.0).dequantize(), values)) << to_string(f);
    // Anything else: LibTorch's own cast (nearest, ties to even) inside the range ...
    auto x = (torch::rand({4096}) * 2 - 1) * (max * 0.999);  // inside the range: no saturation
    EXPECT_TRUE(torch::equal(quantize_fp8(x, f, 1.0).data.to(torch::kFloat), x.to(fp8_dtype(f)).to(torch::kFloat)));
    // ... and +-max past it, infinities included, where a bare e4m3 cast gives NaN.
    const float m = static_cast<float>(max);
    auto big = torch::tensor(std::vector<float>{m * 1.5f, -m * 3, INFINITY, -INFINITY});
    auto q = quantize_fp8(big, f, 1.0).dequantize();
    EXPECT_TRUE(torch::equal(q, torch::tensor(std::vector<float>{m, -m, m, -m}))) << to_string(f) << ": " << q;
    EXPECT_TRUE(std::isnan(quantize_fp8(torch::tensor({NAN}), f, 1.0).dequantize().item<float>()));
  }
  EXPECT_TRUE(std::isnan(torch::tensor({448.0f * 1.5f}).to(torch::kFloat8_e4m3fn).to(torch::kFloat).item<float>()))
      << "the bare cast this quantizer guards against";
}

TEST(Fp8, CurrentScalingPutsTheLargestValueAtTheTopOfTheRange) {
  auto x = torch::randn({64, 32}) * 1e-3;
  x[3][5] = NAN;  // neither NaN nor infinity moves the scale
  x[7][1] = INFINITY;
  auto q = quantize_fp8(x, Fp8Format::kE4M3);
  auto finite = x.isfinite();
  const double amax = x.masked_select(finite).abs().max().item<double>();
  EXPECT_NEAR(q.scale.item<double>(), 448.0 / amax, 1e-3 * 448.0 / amax);
  auto back = q.dequantize();
  EXPECT_NEAR(back.masked_select(finite).abs().max().item<double>(), amax, amax * 1e-6);
  // Relative error within e4m3's half unit in the last place (2^-4) for normal values.
  auto normal = finite.logical_and(x.abs() * q.scale.item<double>() >= std::ldexp(1.0, -6));
  auto rel = ((back - x).abs() / x.abs()).masked_select(normal);
  EXPECT_LE(rel.max().item<double>(), 1.0 / 16 + 1e-6);
  EXPECT_EQ(fp8_scale_for(0.0, Fp8Format::kE5M2, 0, 7.0), 7.0) << "an all-zero tensor keeps the previous scale";
  EXPECT_EQ(fp8_scale_for(448.0, Fp8Format::kE4M3, 2), 0.25) << "margin 2: a quarter";
  testing::expect_error_mentions([] { parse_fp8_scaling("sometimes"); }, {"fp8_scaling 'sometimes'", "delayed"});
  testing::expect_error_mentions([] { quantize_fp8(torch::ones({2}), Fp8Format::kE4M3, 0.0); }, {"scale", "positive"});
}

TEST(Fp8, DelayedScalingUsesTheHistoryThenRecords) {
  Fp8ScaleTracker t(Fp8Format::kE4M3, Fp8Scaling::kDelayed, /*history=*/2);
  (void)t.quantize(torch::full({4}, 2.0));  // no history yet: measured, amax 2
  EXPECT_DOUBLE_EQ(t.scale(), 448.0 / 2);
  auto q = t.quantize(torch::full({4}, 8.0));  // scale from the history (2): 8 saturates
  EXPECT_DOUBLE_EQ(t.scale(), 448.0 / 2);
  EXPECT_EQ(q.dequantize().max().item<double>(), 2.0);
  (void)t.quantize(torch::full({4}, 1.0));  // history {2, 8}: scale from 8
  EXPECT_DOUBLE_EQ(t.scale(), 448.0 / 8);
  (void)t.quantize(torch::full({4}, 1.0));  // history {8, 1}
  EXPECT_DOUBLE_EQ(t.scale(), 448.0 / 8);
  (void)t.quantize(torch::full({4}, 1.0));  // history {1, 1}: 8 has aged out
  EXPECT_DOUBLE_EQ(t.scale(), 448.0);
}

TEST(Fp8, LinearIsTheProductOfItsFp8Values) {
  torch::manual_seed(3);
  auto x = torch::randn({3, 5, 16}).requires_grad_(true);
  auto w = (torch::randn({12, 16}) / 4).requires_grad_(true);
  auto b = torch::randn({12}).requires_grad_(true);
  auto R = torch::randn({3, 5, 12});
  auto state = std::make_shared<Fp8LinearState>();
  auto y = fp8_linear(x, w, b, state);
  (y * R).sum().backward();
  // The same products written out on the dequantized FP8 values: equal up to fp32 summation order.
  auto qx = quantize_fp8(x.detach(), Fp8Format::kE4M3).dequantize();
  auto qw = quantize_fp8(w.detach(), Fp8Format::kE4M3).dequantize();
  auto qg = quantize_fp8(R, Fp8Format::kE5M2).dequantize();
  EXPECT_TRUE(torch::allclose(y, torch::matmul(qx, qw.t()) + b, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(x.grad(), torch::matmul(qg, qw), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(w.grad(), qg.reshape({-1, 12}).t().mm(qx.reshape({-1, 16})), 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(b.grad(), R.sum(std::vector<int64_t>{0, 1}), 1e-5, 1e-5)) << "the bias stays in full precision";
  // And near fp32: e4m3 keeps 3 mantissa bits, e5m2 2.
  auto exact = torch::matmul(x.detach(), w.detach().t()) + b.detach();
  EXPECT_LT(((y - exact).norm() / exact.norm()).item<double>(), 0.08);
  EXPECT_LT(((x.grad() - torch::matmul(R, w.detach())).norm() / torch::matmul(R, w.detach()).norm()).item<double>(),
            0.15);
}

TEST(Fp8, ParallelLinearSwitchesToFp8) {
  using parallel::ParallelLinear;
  using parallel::ParallelLinearOptions;
  torch::manual_seed(4);
  const parallel::ParallelContext one;
  ParallelLinear layer(ParallelLinearOptions{.in_features = 16, .out_features = 8, .bias = true}, one);
  auto x = torch::randn({4, 16});
  auto full = layer->forward(x).detach();
  EXPECT_EQ(parallel::enable_fp8_linears(*layer, {}), 1);
  EXPECT_TRUE(layer->fp8());
  auto y = layer->forward(x);
  auto want = torch::matmul(quantize_fp8(x, Fp8Format::kE4M3).dequantize(),
                            quantize_fp8(layer->weight.detach(), Fp8Format::kE4M3).dequantize().t()) +
              layer->bias.detach();
  EXPECT_TRUE(torch::allclose(y, want, 1e-5, 1e-5));
  EXPECT_FALSE(torch::equal(y.detach(), full)) << "the product changed precision";
  ParallelLinear head(ParallelLinearOptions{.in_features = 16, .out_features = 100,
                                            .style = parallel::SplitStyle::kVocabHead}, one);
  EXPECT_EQ(parallel::enable_fp8_linears(*head, {}), 0) << "the vocabulary head stays in the model's precision";
}

}  // namespace fp8_test
}  // namespace colossal::amp
