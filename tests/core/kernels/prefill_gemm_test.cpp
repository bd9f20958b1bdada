// The prefill GEMM (kernels/cpu/prefill_gemm) against float64 over what it multiplies: the weights
// as unpack_rows gives them and the tokens as it quantized them; every format, row counts that
// leave part of a panel, token counts that leave part of a tile, padded columns.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/prefill_gemm.h"
#include "tests/core/kernels/kquant_blocks.h"

namespace colossal::kernels::cpu {
namespace prefill_gemm_test {

struct Weights {
  WeightFormat format;
  int64_t rows, cols;
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales;
  MatrixView view() const { return {format, rows, cols, data.data(), scales.empty() ? nullptr : scales.data()}; }
};

Weights make(WeightFormat f, int64_t rows, int64_t cols, uint32_t seed) {
  Weights w{f, rows, cols, {}, {}};
  if (is_kquant(f)) {
    w.data = testing::random_kquant_blocks(f, rows, cols, seed);
    return w;
  }
  torch::manual_seed(seed);
  auto values = (torch::randn({rows, cols}) * torch::rand({rows, 1}) * 0.1).contiguous();
  w.data.resize(static_cast<size_t>(data_bytes(f, rows, cols)));
  w.scales.resize(static_cast<size_t>(scale_count(f, rows, cols)));
  pack_rows(values.data_ptr<float>(), rows, cols, f, w.data.data(), w.scales.data());
  return w;
}

// |each term| the kernel adds per weight: |scale q| + |offset| (K-quants, int4's +8), |w| for int8.
torch::Tensor term_sizes(const Weights& w) {
  if (is_kquant(w.format)) return testing::kquant_term_sizes(w.format, w.data.data(), w.rows, w.cols);
  auto size = torch::empty({w.rows, w.cols}, torch::kDouble);
  auto seen = torch::empty({w.rows, w.cols});
  unpack_rows(w.view(), 0, w.rows, seen.data_ptr<float>());
  size.copy_(seen.abs());
  if (w.format == WeightFormat::kQ4) {  // the stored value + 8, then 8 x scale taken back
    const int64_t blocks = stored_cols(w.format, w.cols) / kQuantBlock;
    for (int64_t r = 0; r < w.rows; ++r)
      for (int64_t c = 0; c < w.cols; ++c)
        size[r][c] = size[r][c].item<double>() + 16 * std::fabs(half_to_float(w.scales[r * blocks + c / kQuantBlock]));
  }
  return size;
}

TEST(PrefillGemm, EveryFormatMatchesFloat64OnWhatItMultiplies) {
  const WeightFormat formats[] = {WeightFormat::kQ8,  WeightFormat::kQ4,  WeightFormat::kQ2K, WeightFormat::kQ3K,
                                  WeightFormat::kQ4K, WeightFormat::kQ5K, WeightFormat::kQ6K};
  for (auto f : formats) {
    if (!prefill_gemm_supports(f)) GTEST_SKIP() << "no AVX2/FMA/F16C here: the prefill GEMM does not run";
    uint32_t seed = 11;
    PrefillInput in;
    const std::vector<int64_t> widths = is_kquant(f) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{100, 320};
    for (int64_t cols : widths)
      for (int64_t rows : {5, 8, 37})
        for (int64_t n : {9, 3, 4, 1}) {
          const auto w = make(f, rows, cols, seed++);
          torch::manual_seed(seed);
          auto x = (torch::randn({n, cols}) * torch::rand({n, 1}) * 4).contiguous();
          x[0][cols - 1] = 0;  // zeros and the tail of a padded block
          prepare_prefill_input(in, f, n, cols);  // reused: a larger input's leftovers must not count
          quantize_prefill_rows(in, x.data_ptr<float>(), 0, n / 2);  // any split among threads
          quantize_prefill_rows(in, x.data_ptr<float>(), n / 2, n);
          {  // the vector quantizer gives the portable one's values, scales and sums
            PrefillInput portable;
            prepare_prefill_input(portable, f, n, cols);
            detail::quantize_prefill_rows_scalar(portable, x.data_ptr<float>(), 0, n);
            ASSERT_EQ(portable.q, in.q) << to_string(f) << " n " << n;
            ASSERT_EQ(portable.scale, in.scale);
            ASSERT_EQ(portable.group_sum, in.group_sum);
          }
          // The tokens as quantized: within half a step of x, zero past the logical columns, and the
          // group sums theirs.
          const int64_t groups = in.cols / in.group;
          auto seen_x = torch::zeros({n, cols}, torch::kDouble);
          for (int64_t i = 0; i < n; ++i) {
            for (int64_t c = 0; c < in.cols; ++c) {
              const double step = in.block_scale(i, c / kQuantBlock), v = in.value(i, c) * step;
              if (c >= cols) {
                ASSERT_EQ(in.value(i, c), 0) << "padding column " << c;
                continue;
              }
              ASSERT_LE(std::fabs(v - x[i][c].item<double>()), 0.5001 * step) << to_string(f) << " " << i << "," << c;
              seen_x[i][c] = v;
            }
            for (int64_t g = 0; g < groups; ++g) {
              int sum = 0;
              for (int64_t c = g * in.group; c < (g + 1) * in.group; ++c) sum += in.value(i, c);
              ASSERT_FLOAT_EQ(in.sum_over_group(i, g), in.block_scale(i, g * in.group / kQuantBlock) * sum);
            }
          }
          auto seen_w = torch::empty({rows, cols});
          unpack_rows(w.view(), 0, rows, seen_w.data_ptr<float>());
          auto ref = torch::matmul(seen_x, seen_w.to(torch::kDouble).t());
          auto bound = torch::matmul(seen_x.abs(), term_sizes(w).t()) * 2e-6 + 1e-12;
          auto y = torch::full({n, rows + 3}, std::nan(""));  // ldy past the rows: nothing else written
          prefill_gemm(w.view(), in, y.data_ptr<float>(), rows + 3, 0, std::min<int64_t>(rows, 16));
          if (rows > 16) prefill_gemm(w.view(), in, y.data_ptr<float>(), rows + 3, 16, rows);
          auto got = y.narrow(1, 0, rows).to(torch::kDouble);
          auto err = (got - ref).abs();
          EXPECT_TRUE((err <= bound).all().item<bool>())
              << to_string(f) << " rows " << rows << " cols " << cols << " n " << n << ": max error "
              << err.max().item<double>() << " (bound " << bound.min().item<double>() << ".." << bound.max().item<double>()
              << ")";
          EXPECT_TRUE(y.narrow(1, rows, 3).isnan().all().item<bool>()) << to_string(f) << ": wrote past its rows";
        }
  }
}

TEST(PrefillGemm, MisusesAreNamed) {
  if (!prefill_gemm_supports(WeightFormat::kQ8)) GTEST_SKIP() << "no AVX2/FMA/F16C here";
  const auto w = make(WeightFormat::kQ8, 16, 64, 3);
  PrefillInput in;
  std::vector<float> x(2 * 64, 1.0f), y(2 * 16);
  prepare_prefill_input(in, WeightFormat::kQ4, 2, 64);
  quantize_prefill_rows(in, x.data(), 0, 2);
  try {
    prefill_gemm(w.view(), in, y.data(), 16, 0, 16);
    FAIL() << "an input prepared for int4 was taken for int8 weights";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("prepared for int4"), std::string::npos) << e.what();
  }
  prepare_prefill_input(in, WeightFormat::kQ8, 2, 64);
  quantize_prefill_rows(in, x.data(), 0, 2);
  EXPECT_THROW(prefill_gemm(w.view(), in, y.data(), 16, 4, 16), std::invalid_argument);  // not a panel start
  EXPECT_THROW(prepare_prefill_input(in, WeightFormat::kF32, 2, 64), std::invalid_argument);
  // Turned off, it says so instead of running.
  const bool was = prefill_gemm_enable(false);
  EXPECT_FALSE(prefill_gemm_supports(WeightFormat::kQ8));
  EXPECT_THROW(prefill_gemm(w.view(), in, y.data(), 16, 0, 16), std::invalid_argument);
  prefill_gemm_enable(was);
}

}  // namespace prefill_gemm_test
}  // namespace colossal::kernels::cpu
