// QLoRA's quantized base (core/nn/quantized_weight.h, ParallelLinear::quantize_base): NF4 keeps
// QLoRA's levels and round-trips every value to its nearest level; the quantized linear's forward
// and input gradient equal a plain linear over the dequantized weight (in float64: exactly the
// same products), piece by piece as whole; a QLoRA layer trains exactly as a LoRA layer whose
// base is the dequantized weight; bad uses are named. bitsandbytes' own values are compared in
// tests/python/test_lora.py.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>

#include "core/nn/quantized_weight.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "core/peft/lora.h"
#include "kernels/cpu/nf4.h"
#include "tests/support/errors.h"

namespace colossal::peft {
namespace {

using Format = nn::QuantizedWeight::Format;

#define EXPECT_THROW_WITH(call, text) \
  EXPECT_NE(testing::error_message_of([&] { (void)(call); }).find(text), std::string::npos) \
      << testing::error_message_of([&] { (void)(call); })

TEST(Qlora, Nf4RoundTripsEachValueToItsNearestLevel) {
  torch::manual_seed(0);
  // Odd column count: blocks of 64 straddle rows; the scalar head and tail of the fast path run.
  auto w = torch::randn({37, 75}) * 0.05;
  w[3][5] = 0.0;
  nn::QuantizedWeight q(w, Format::kNf4);
  auto back = q.dequantize();
  ASSERT_EQ(back.sizes(), w.sizes());
  auto flat = w.reshape({-1}), got = back.reshape({-1});
  const auto levels = torch::from_blob(const_cast<float*>(kernels::cpu::kNf4Values), {16}).clone();
  // Each block's decoded absmax (double quantization) times its nearest level.
  for (int64_t b = 0; b * 64 < flat.numel(); ++b) {
    const int64_t n = std::min<int64_t>(64, flat.numel() - b * 64);
    auto x = flat.narrow(0, b * 64, n), y = got.narrow(0, b * 64, n);
    const double absmax = x.abs().max().item<double>();
    const double decoded = y.abs().max().item<double>();  // the level 1 or -1 is the block's largest
    EXPECT_NEAR(decoded, absmax, 0.01 * absmax) << "block " << b;  // 8-bit absmax: < 1% off
    auto scaled = x / absmax;
    auto nearest = levels.index({(scaled.unsqueeze(1) - levels.unsqueeze(0)).abs().argmin(1)});
    EXPECT_TRUE(torch::allclose(y, nearest * decoded, 1e-6, 1e-9)) << "block " << b;
  }
  EXPECT_EQ(back[3][5].item<float>(), 0.0f);  // zero is a level
  EXPECT_EQ(kernels::cpu::kNf4Values[7], 0.0f);
  EXPECT_EQ(q.bytes(), (37 * 75 + 1) / 2 + (37 * 75 + 63) / 64 + 4);
  // The 8-bit absmax map: 256 ascending values from -1 (exclusive) to 1 with 0 among them.
  const auto& map = nn::QuantizedWeight::dynamic_map();
  ASSERT_EQ(map.numel(), 256);
  EXPECT_TRUE((map.slice(0, 1) > map.slice(0, 0, -1)).all().item<bool>());
  EXPECT_EQ(map[255].item<float>(), 1.0f);
  EXPECT_TRUE((map == 0).any().item<bool>());
}

TEST(Qlora, QuantizedLinearEqualsLinearOverTheDequantizedWeight) {
  torch::manual_seed(1);
  for (auto format : {Format::kNf4, Format::kInt8, Format::kInt4}) {
    // 1100 x 4096 is over one piece (4M elements): two pieces of rows.
    for (auto shape : {std::vector<int64_t>{24, 40}, std::vector<int64_t>{1100, 4096}}) {
      nn::QuantizedWeight q(torch::randn(shape) * 0.02, format);
      auto W = q.dequantize().to(torch::kFloat64);
      auto x = torch::randn({3, 2, shape[1]}, torch::kFloat64).requires_grad_(true);
      auto g = torch::randn({3, 2, shape[0]}, torch::kFloat64);
      auto y = nn::quantized_linear(x, q);
      (y * g).sum().backward();
      auto x2 = x.detach().clone().requires_grad_(true);
      auto want = torch::matmul(x2, W.t());
      (want * g).sum().backward();
      const char* name = nn::QuantizedWeight::name(format);
      EXPECT_LT((y - want).abs().max().item<double>(), 1e-12) << name << " " << shape[0];
      EXPECT_LT((x.grad() - x2.grad()).abs().max().item<double>(), 1e-12) << name << " " << shape[0];
    }
  }
}

TEST(Qlora, APartOfTheWholeHoldsTheWholesValuesBitForBit) {
  // A tensor-parallel rank's rectangle (rows of a column layer, columns of a row layer) keeps the
  // values quantizing the whole matrix gives: tp runs dequantize what one process does.
  torch::manual_seed(3);
  auto full = torch::randn({48, 256}) * 0.05;
  full[7][200] = 3.0;  // one block's outlier: its absmax and its 256-block's double-quant scale
  for (auto format : {Format::kNf4, Format::kInt8, Format::kInt4}) {
    const auto whole = nn::QuantizedWeight(full, format).dequantize();
    for (auto [r0, r1, c0, c1] : {std::array<int64_t, 4>{0, 24, 0, 256}, std::array<int64_t, 4>{24, 48, 0, 256},
                                  std::array<int64_t, 4>{0, 48, 128, 256}, std::array<int64_t, 4>{0, 48, 64, 192}}) {
      ASSERT_TRUE(nn::QuantizedWeight::part_is_exact(format, 256, c0, c1));
      const auto part = nn::QuantizedWeight::part_of(full, format, r0, r1, c0, c1);
      EXPECT_TRUE(torch::equal(part.dequantize(), whole.slice(0, r0, r1).slice(1, c0, c1)))
          << nn::QuantizedWeight::name(format) << " [" << r0 << ", " << r1 << ") x [" << c0 << ", " << c1 << ")";
    }
    // Quantizing the columns alone would not do for nf4: another mean and other 256-blocks.
    if (format == Format::kNf4)
      EXPECT_FALSE(torch::equal(nn::QuantizedWeight(full.slice(1, 128, 256), format).dequantize(),
                                whole.slice(1, 128, 256)));
  }
  EXPECT_FALSE(nn::QuantizedWeight::part_is_exact(Format::kNf4, 256, 32, 256));   // half a block
  EXPECT_FALSE(nn::QuantizedWeight::part_is_exact(Format::kNf4, 96, 0, 96));      // blocks span rows
  EXPECT_TRUE(nn::QuantizedWeight::part_is_exact(Format::kInt8, 96, 32, 96));
  EXPECT_FALSE(nn::QuantizedWeight::part_is_exact(Format::kInt4, 96, 16, 96));
  EXPECT_THROW_WITH(nn::QuantizedWeight::part_of(full, Format::kNf4, 0, 48, 32, 256), "block boundaries");
}

TEST(Qlora, AQloraLayerTrainsAsLoraOverTheDequantizedBase) {
  torch::manual_seed(2);
  auto make = [] {
    return parallel::ParallelLinear(parallel::ParallelLinearOptions{.in_features = 64, .out_features = 48, .bias = true},
                                    parallel::ParallelContext{});
  };
  auto qlora = make(), lora = make();
  {
    torch::NoGradGuard no_grad;
    lora->weight.copy_(qlora->weight);
    lora->bias.copy_(qlora->bias);
  }
  for (auto* l : {&qlora, &lora}) {
    (*l)->add_lora({.rank = 4, .alpha = 8, .init = "gaussian", .seed = 3}, "layer");
    (*l)->weight.set_requires_grad(false);
  }
  qlora->quantize_base(Format::kNf4);
  EXPECT_EQ(qlora->weight.numel(), 0);  // the fp32 base is gone
  {
    torch::NoGradGuard no_grad;
    lora->weight.copy_(qlora->quantized().dequantize());
  }
  auto x = torch::randn({5, 64});
  for (auto* l : {&qlora, &lora}) {
    auto y = (*l)->forward(x);
    y.pow(2).sum().backward();
  }
  EXPECT_TRUE(torch::allclose(qlora->forward(x), lora->forward(x), 1e-5, 1e-6));
  EXPECT_TRUE(torch::allclose(qlora->lora_A->weight.grad(), lora->lora_A->weight.grad(), 1e-5, 1e-7));
  EXPECT_TRUE(torch::allclose(qlora->lora_B->weight.grad(), lora->lora_B->weight.grad(), 1e-5, 1e-7));
  EXPECT_FALSE(qlora->weight.grad().defined());
}

TEST(Qlora, BadUsesAreNamed) {
  auto layer = parallel::ParallelLinear(parallel::ParallelLinearOptions{.in_features = 8, .out_features = 8},
                                        parallel::ParallelContext{});
  EXPECT_THROW_WITH(layer->quantize_base(Format::kNf4), "only a LoRA run's frozen base");
  EXPECT_THROW_WITH(nn::QuantizedWeight::parse("nf3"), "expected nf4, int8 or int4");
  LoraConfig c;
  c.rank = 0;
  c.quantize_base = "nf4";
  EXPECT_THROW_WITH(c.validate(), "needs --lora_rank > 0");
  layer->add_lora({.rank = 2}, "layer");
  layer->weight.set_requires_grad(false);
  layer->quantize_base(Format::kInt4);
  EXPECT_THROW_WITH(layer->merge_lora(), "colossal merge");
  EXPECT_THROW_WITH(layer->quantize_base(Format::kNf4), "quantized already");
}

}  // namespace
}  // namespace colossal::peft
