// K-quant matvec (kernels/cpu/kquants): every format and implementation against float64 over the
// values the kernel multiplies; the Q8_K activations as llama.cpp defines them; the block layouts
// themselves are checked against llama.cpp's `gguf` package in tests/llama/gguf_test.cpp.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "kernels/cpu/kquants.h"
#include "kernels/cpu/matvec.h"
#include "tests/core/kernels/kquant_blocks.h"

namespace colossal::kernels::cpu {
namespace kquants_test {  // named: the unity build puts matvec_test.cpp's helpers beside these

constexpr WeightFormat kFormats[] = {WeightFormat::kQ2K, WeightFormat::kQ3K, WeightFormat::kQ4K, WeightFormat::kQ5K,
                                     WeightFormat::kQ6K};

std::vector<std::string> implementations(WeightFormat f) {
  std::vector<std::string> names{"scalar"};
  try {
    matvec_use("avx2");
    if (std::string(matvec_implementation(f)) == "avx2") names.push_back("avx2");
  } catch (const std::invalid_argument&) {
  }
  matvec_use("auto");
  return names;
}

TEST(KQuants, EveryFormatAndImplementationMatchesFloat64OnWhatItSees) {
  torch::manual_seed(5);
  uint32_t seed = 1;
  for (auto f : kFormats)
    for (int64_t cols : {256, 768, 4096})
      for (int64_t rows : {1, 7, 33})
        for (int64_t m : {1, 3, 8, 13, 16}) {
          auto data = testing::random_kquant_blocks(f, rows, cols, seed++);
          const MatrixView w{f, rows, cols, data.data(), nullptr};
          auto x = torch::randn({m, cols}) * torch::rand({m, 1}) * 4;
          MatvecInput in;
          prepare_input(in, f, x.data_ptr<float>(), m, cols);
          // The weights as the kernel multiplies them, and the size of their two terms (d scale q,
          // dm min): the min term is subtracted, so the bound follows the terms, not their difference.
          auto seen_w = torch::empty({rows, cols});
          const auto size_w = testing::kquant_term_sizes(f, data.data(), rows, cols);
          matvec_use("scalar");
          unpack_rows(w, 0, rows, seen_w.data_ptr<float>());
          matvec_use("auto");
          auto seen_x = torch::empty({m, cols}, torch::kDouble);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < cols; ++c)
              seen_x[i][c] = double(in.q[i * cols + c]) * in.block_scale[i * (cols / kSuperBlock) + c / kSuperBlock];
          auto ref = torch::matmul(seen_x, seen_w.to(torch::kDouble).t());
          auto bound = torch::matmul(seen_x.abs(), size_w.t()) * 2e-6 + 1e-30;
          for (const auto& impl : implementations(f)) {
            matvec_use(impl);
            auto again = torch::empty({rows, cols});
            unpack_rows(w, 0, rows, again.data_ptr<float>());
            EXPECT_TRUE(torch::equal(again, seen_w)) << to_string(f) << " " << impl << ": the dequantization differs";
            auto y = torch::full({m, rows}, std::nan(""));
            matvec(w, in, y.data_ptr<float>(), rows, 0, rows / 2);
            matvec(w, in, y.data_ptr<float>(), rows, rows / 2, rows);
            auto err = (y.to(torch::kDouble) - ref).abs();
            EXPECT_TRUE((err <= bound).all().item<bool>())
                << to_string(f) << " " << impl << " rows " << rows << " cols " << cols << " m " << m
                << ": max error " << err.max().item<double>() << " (bound " << bound.max().item<double>() << ")";
          }
          matvec_use("auto");
        }
}

// llama.cpp's quantize_row_q8_K: the value of largest magnitude becomes -127 exactly, the others
// round to nearest (even) and clamp at 127; the group sums are the sums of the codes.
TEST(KQuants, Q8KActivationsAreLlamaCppsDefinition) {
  torch::manual_seed(6);
  auto x = torch::randn({2 * kSuperBlock}) * 3;
  x[17] = 31.5f;         // the extreme of the first super-block, positive
  x[300] = -29.25f;      // of the second, negative
  x.narrow(0, 0, 4).zero_();
  std::vector<int8_t> q(2 * kSuperBlock);
  std::vector<float> d(2);
  std::vector<int16_t> sums(32);
  quantize_q8k(x.data_ptr<float>(), 2 * kSuperBlock, q.data(), d.data(), sums.data());
  EXPECT_EQ(q[17], -127);
  EXPECT_EQ(q[300], -127);
  EXPECT_FLOAT_EQ(d[0], 1.0f / (-127.0f / 31.5f));
  for (int64_t i = 0; i < 2 * kSuperBlock; ++i) {
    const float v = x[i].item<float>();
    const float step = d[i / kSuperBlock];
    EXPECT_LE(std::fabs(q[i] * step - v), 0.5001f * std::fabs(step)) << i;
    EXPECT_EQ(q[i], std::min(127, static_cast<int>(std::nearbyint(v * (-127.0f / (i < kSuperBlock ? 31.5f : -29.25f))))))
        << i;
  }
  for (int j = 0; j < 32; ++j) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) sum += q[16 * j + l];
    EXPECT_EQ(sums[j], sum) << j;
  }
  // All zeros: a zero scale and zero codes, no division by zero.
  std::vector<float> zeros(kSuperBlock, 0.0f);
  quantize_q8k(zeros.data(), kSuperBlock, q.data(), d.data(), sums.data());
  EXPECT_EQ(d[0], 0.0f);
  EXPECT_EQ(q[5], 0);
}

// The quantizer (what colossal export --outtype q4_k_m writes): blocks that read back within the
// format's error on Gaussian (and all-positive) weights with outliers, zeros kept zero;
// tests/python/test_gguf_export.py holds it to llama-quantize's blocks.
TEST(KQuants, QuantizedBlocksReadBackWithinTheFormatsError) {
  torch::manual_seed(7);
  const int64_t n = 64 * kSuperBlock;
  auto x = torch::randn({n}) * 0.02;
  x.narrow(0, 5, 3).mul_(40);  // outliers in the first super-block
  x.narrow(0, kSuperBlock, kSuperBlock).zero_();  // a super-block of zeros
  x.narrow(0, 2 * kSuperBlock, kSuperBlock).abs_();  // all positive
  // Relative rms error bounds (on Gaussian weights alone: Q4_K 0.071, Q5_K 0.036, Q6_K 0.018 of the rms).
  for (auto [f, bound] : {std::pair{WeightFormat::kQ4K, 0.10}, {WeightFormat::kQ5K, 0.05}, {WeightFormat::kQ6K, 0.025}}) {
    std::vector<uint8_t> blocks(static_cast<size_t>(n / kSuperBlock * kquant_block_bytes(f)));
    quantize_kquant(f, x.data_ptr<float>(), n, blocks.data());
    auto back = torch::empty({n});
    dequantize_kquant(f, blocks.data(), n, back.data_ptr<float>());
    auto rest = x.narrow(0, 2 * kSuperBlock, n - 2 * kSuperBlock);  // the all-positive one and the Gaussians
    auto err = (back - x).narrow(0, 2 * kSuperBlock, n - 2 * kSuperBlock);
    const double rel = (err.pow(2).mean().sqrt() / rest.pow(2).mean().sqrt()).item<double>();
    EXPECT_LT(rel, bound) << to_string(f);
    EXPECT_GT(rel, bound / 10) << to_string(f) << ": no 4-6 bit format is this exact; the test reads wrong";
    EXPECT_TRUE(back.narrow(0, kSuperBlock, kSuperBlock).eq(0).all().item<bool>()) << to_string(f);
    // The outliers keep their size (the super-block's scale follows them) within a step of theirs.
    const auto big = x.narrow(0, 5, 3), got = back.narrow(0, 5, 3);
    EXPECT_LT(((got - big).abs() / big.abs()).max().item<double>(), 0.1) << to_string(f);
  }
  std::vector<uint8_t> q2(84);
  try {
    quantize_kquant(WeightFormat::kQ2K, x.data_ptr<float>(), kSuperBlock, q2.data());
    ADD_FAILURE() << "Q2_K is not written";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("written: q4_k, q5_k, q6_k"), std::string::npos) << e.what();
  }
  EXPECT_THROW(quantize_kquant(WeightFormat::kQ4K, x.data_ptr<float>(), 300, q2.data()), std::invalid_argument);
}

TEST(KQuants, ErrorsNameTheProblem) {
  std::vector<float> x(300, 1.0f);
  MatvecInput in;
  try {
    prepare_input(in, WeightFormat::kQ4K, x.data(), 1, 300);
    ADD_FAILURE() << "300 columns are not whole super-blocks";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("256"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> data(data_bytes(WeightFormat::kQ4K, 1, 256));
  try {
    pack_rows(x.data(), 1, 256, WeightFormat::kQ4K, data.data(), nullptr);
    ADD_FAILURE() << "no K-quant quantizer";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("GGUF"), std::string::npos) << e.what();
  }
  for (auto f : kFormats) EXPECT_EQ(weight_format(to_string(f)), f);
  EXPECT_EQ(data_bytes(WeightFormat::kQ4K, 3, 512), 3 * 2 * 144);
  EXPECT_EQ(scale_count(WeightFormat::kQ6K, 3, 512), 0);
}

}  // namespace kquants_test
}  // namespace colossal::kernels::cpu
