// The decode matvec (kernels/cpu/matvec) against plain float64 arithmetic: every format, every
// implementation this CPU runs, odd shapes, 1..8 input rows.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "kernels/cpu/matvec.h"

namespace colossal::kernels::cpu {
namespace {

struct Packed {
  WeightFormat format;
  int64_t rows, cols;
  std::vector<uint8_t> data;
  std::vector<uint16_t> scales;
  MatrixView view() const {
    return {format, rows, cols, data.data(), scales.empty() ? nullptr : scales.data()};
  }
};

Packed pack(const torch::Tensor& w, WeightFormat f) {
  Packed p{f, w.size(0), w.size(1), {}, {}};
  p.data.resize(static_cast<size_t>(data_bytes(f, p.rows, p.cols)));
  p.scales.resize(static_cast<size_t>(scale_count(f, p.rows, p.cols)));
  pack_rows(w.contiguous().data_ptr<float>(), p.rows, p.cols, f, p.data.data(), p.scales.data());
  return p;
}

torch::Tensor unpacked(const Packed& p) {
  auto out = torch::empty({p.rows, p.cols});
  unpack_rows(p.view(), 0, p.rows, out.data_ptr<float>());
  return out;
}

// The input as the kernel sees it: rounded to bf16, or quantized and scaled back.
torch::Tensor input_as_seen(const MatvecInput& in, int64_t m, int64_t cols) {
  auto x = torch::empty({m, cols}, torch::kDouble);
  auto a = x.accessor<double, 2>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t c = 0; c < cols; ++c) {
      switch (in.format) {
        case WeightFormat::kF32:
        case WeightFormat::kF16: a[i][c] = in.f32[i * in.stride + c]; break;
        case WeightFormat::kBF16: {
          uint32_t bits = static_cast<uint32_t>(in.bf16[i * in.stride + c]) << 16;
          float f;
          std::memcpy(&f, &bits, 4);
          a[i][c] = f;
          break;
        }
        default:
          a[i][c] = static_cast<double>(in.q[i * in.stride + c]) *
                    in.block_scale[i * (in.stride / kQuantBlock) + c / kQuantBlock];
      }
    }
  return x;
}

std::vector<std::string> implementations(WeightFormat f) {
  std::vector<std::string> names{"scalar"};
  matvec_use("auto");
  if (std::string(matvec_implementation(f)) == "avx512") names.push_back("avx512");
  try {  // the AVX2 kernels, on CPUs that have AVX2 (AVX-512 ones too)
    matvec_use("avx2");
    names.push_back("avx2");
  } catch (const std::invalid_argument&) {
  }
  matvec_use("auto");
  return names;
}

TEST(Matvec, EveryFormatAndImplementationMatchesFloat64OnWhatItSees) {
  torch::manual_seed(3);
  for (auto f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kQ8, WeightFormat::kQ4})
    for (int64_t cols : {1, 7, 32, 64, 100, 288, 520, 4097})
      for (int64_t rows : {1, 7, 33})
        for (int64_t m : {1, 3, 8, 13, 16}) {
          auto w = torch::randn({rows, cols});
          auto x = torch::randn({m, cols});
          auto p = pack(w, f);
          MatvecInput in;
          prepare_input(in, f, x.data_ptr<float>(), m, cols);
          // float64 over exactly the values the kernel multiplies: only the summation differs.
          auto seen_w = unpacked(p).to(torch::kDouble);
          auto seen_x = input_as_seen(in, m, cols);
          auto ref = torch::matmul(seen_x, seen_w.t());
          auto bound = torch::matmul(seen_x.abs(), seen_w.abs().t()) * 1e-5 + 1e-30;  // fp32 sums
          for (const auto& impl : implementations(f)) {
            matvec_use(impl);
            auto y = torch::full({m, rows}, std::nan(""));
            // Three ranges, as three threads would split them.
            const int64_t cut1 = rows / 3, cut2 = 2 * rows / 3;
            matvec(p.view(), in, y.data_ptr<float>(), rows, 0, cut1);
            matvec(p.view(), in, y.data_ptr<float>(), rows, cut1, cut2);
            matvec(p.view(), in, y.data_ptr<float>(), rows, cut2, rows);
            auto err = (y.to(torch::kDouble) - ref).abs();
            EXPECT_TRUE((err <= bound).all().item<bool>())
                << to_string(f) << " " << impl << " rows " << rows << " cols " << cols << " m " << m
                << ": max error " << err.max().item<double>() << " (bound " << bound.max().item<double>() << ")";
          }
          matvec_use("auto");
        }
}

TEST(Matvec, QuantizedWeightsAndInputsStayWithinTheirRoundingBounds) {
  torch::manual_seed(4);
  const int64_t rows = 9, cols = 4097;
  auto w = torch::randn({rows, cols}) * torch::rand({rows, 1}) * 3;
  for (auto f : {WeightFormat::kQ8, WeightFormat::kQ4}) {
    auto p = pack(w, f);
    auto back = unpacked(p);
    const int64_t blocks = stored_cols(f, cols) / kQuantBlock;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b * kQuantBlock < cols; ++b) {
        const int64_t lo = b * kQuantBlock, n = std::min(kQuantBlock, cols - lo);
        const double d = std::fabs(half_to_float(p.scales[r * blocks + b]));
        // q8: half a step, plus the fp16 rounding of the scale times the largest code (127);
        // q4: the positive extreme clamps from +8 to +7, a whole step.
        const double bound = (f == WeightFormat::kQ8 ? 0.5 * d + 127 * d / 2048 : d + 8 * d / 2048) * 1.0001;
        auto err = (back[r].narrow(0, lo, n) - w[r].narrow(0, lo, n)).abs().max().item<double>();
        EXPECT_LE(err, bound) << to_string(f) << " row " << r << " block " << b;
      }
    // The padding beyond the last column holds zeros: the product over the padding is nothing.
    auto x = torch::randn({1, cols});
    MatvecInput in;
    prepare_input(in, f, x.data_ptr<float>(), 1, cols);
    for (int64_t c = cols; c < in.stride; ++c) ASSERT_EQ(in.q[c], 0);
    auto seen = input_as_seen(in, 1, cols).to(torch::kFloat);
    auto step = torch::tensor(in.block_scale).repeat_interleave(kQuantBlock).narrow(0, 0, cols);
    EXPECT_TRUE(((seen[0] - x[0]).abs() <= step * 0.5001 + 1e-12).all().item<bool>());
  }
}

TEST(Matvec, VectorInputQuantizationIsTheScalarOne) {
  torch::manual_seed(8);
  for (auto f : {WeightFormat::kQ8, WeightFormat::kQ4})
    for (int64_t cols : {1, 31, 64, 100, 4097}) {
      auto x = torch::randn({3, cols}) * 5;
      x.index_put_({0, 0}, 0.0);  // and a block of zeros
      MatvecInput scalar, vector;
      matvec_use("scalar");
      prepare_input(scalar, f, x.data_ptr<float>(), 3, cols);
      matvec_use("auto");
      prepare_input(vector, f, x.data_ptr<float>(), 3, cols);
      EXPECT_EQ(scalar.q, vector.q) << to_string(f) << " cols " << cols;
      EXPECT_EQ(scalar.block_scale, vector.block_scale);
      EXPECT_EQ(scalar.lane_offset, vector.lane_offset);
    }
  auto zeros = torch::zeros({1, 64});
  MatvecInput in;
  prepare_input(in, WeightFormat::kQ8, zeros.data_ptr<float>(), 1, 64);
  EXPECT_EQ(in.block_scale[0], 0.0f);
  EXPECT_EQ(in.q[5], 0);
}

TEST(Matvec, Bf16UnpackIsTheFp32UnpackRounded) {
  torch::manual_seed(6);
  for (auto f : {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kQ8, WeightFormat::kQ4})
    for (int64_t cols : {7, 64, 100, 4097}) {
      auto p = pack(torch::randn({5, cols}), f);
      auto expected = unpacked(p).narrow(0, 1, 3).to(torch::kBFloat16);
      for (const auto& impl : implementations(f)) {
        matvec_use(impl);
        auto got = torch::empty({3, cols}, torch::kBFloat16);
        unpack_rows_bf16(p.view(), 1, 4, reinterpret_cast<uint16_t*>(got.data_ptr()));
        EXPECT_TRUE(torch::equal(got, expected)) << to_string(f) << " " << impl << " cols " << cols;
      }
      matvec_use("auto");
    }
}

// The vector fp32 unpack (the prefill's weights on CPUs without bf16 units) is the scalar one.
TEST(Matvec, VectorUnpackIsTheScalarOne) {
  torch::manual_seed(9);
  for (auto f : {WeightFormat::kBF16, WeightFormat::kF16, WeightFormat::kQ8, WeightFormat::kQ4})
    for (int64_t cols : {7, 64, 100, 4097}) {
      auto p = pack(torch::randn({5, cols}) * 3, f);
      matvec_use("scalar");
      auto expected = unpacked(p).narrow(0, 1, 3).clone();
      for (const auto& impl : implementations(f)) {
        matvec_use(impl);
        auto got = torch::full({3, cols}, std::nan(""));
        unpack_rows(p.view(), 1, 4, got.data_ptr<float>());
        EXPECT_TRUE(torch::equal(got, expected)) << to_string(f) << " " << impl << " cols " << cols;
      }
      matvec_use("auto");
    }
}

TEST(Matvec, HalfConversionIsTorchsOnEveryKindOfValue) {
  torch::manual_seed(5);
  auto values = torch::cat({torch::randn({4000}) * 1e-3, torch::randn({4000}) * 1e4, torch::randn({2000}) * 1e-6,
                            torch::tensor({0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, 1e9f, 5.96e-8f, 2.98e-8f,
                                           6.1e-5f, std::numeric_limits<float>::infinity()})});
  auto halves = values.to(torch::kHalf);
  for (int64_t i = 0; i < values.numel(); ++i) {
    float v = values[i].item<float>();
    uint16_t expected = halves[i].view(torch::kShort).item<int16_t>();
    ASSERT_EQ(float_to_half(v), expected) << "value " << v;
    ASSERT_EQ(half_to_float(expected), halves[i].to(torch::kFloat).item<float>()) << "bits " << expected;
  }
}

// f16 weights are stored as torch (and llama.cpp's converter) round them, and read back exactly.
TEST(Matvec, F16WeightsAreTorchsHalfRounding) {
  torch::manual_seed(10);
  auto w = torch::cat({torch::randn({3, 77}) * 1e-5, torch::randn({3, 77}) * 300}, 0);
  auto p = pack(w, WeightFormat::kF16);
  auto halves = w.to(torch::kHalf).contiguous();
  ASSERT_EQ(p.data.size(), static_cast<size_t>(halves.nbytes()));
  EXPECT_EQ(std::memcmp(p.data.data(), halves.data_ptr(), p.data.size()), 0);
  EXPECT_TRUE(torch::equal(unpacked(p), halves.to(torch::kFloat)));
  EXPECT_EQ(weight_format("fp16"), WeightFormat::kF16);
  EXPECT_EQ(weight_format(to_string(WeightFormat::kF16)), WeightFormat::kF16);
}

// Our int8/int4 storage to llama.cpp's q8_0/q4_0 blocks and back is the identity (the GGUF
// writer and reader), and a block's bytes are its scale then its values.
TEST(Matvec, GgmlBlocksRoundTrip) {
  torch::manual_seed(11);
  for (auto f : {WeightFormat::kQ8, WeightFormat::kQ4}) {
    const int64_t rows = 3, cols = 96, block = f == WeightFormat::kQ8 ? 34 : 18;
    auto p = pack(torch::randn({rows, cols}) * 2, f);
    std::vector<uint8_t> blocks(static_cast<size_t>(rows * cols / kQuantBlock * block));
    to_ggml_rows(p.view(), 0, rows, blocks.data());
    uint16_t first_scale;
    std::memcpy(&first_scale, blocks.data(), 2);
    EXPECT_EQ(first_scale, p.scales[0]);
    Packed back{f, rows, cols, std::vector<uint8_t>(p.data.size()), std::vector<uint16_t>(p.scales.size())};
    pack_ggml_rows(blocks.data(), rows, cols, f, back.data.data(), back.scales.data());
    EXPECT_EQ(back.data, p.data) << to_string(f);
    // The blocks' scales (the padding block past column 96 holds zeros either way: -0 or +0).
    const int64_t stored_blocks = stored_cols(f, cols) / kQuantBlock;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = 0; b < cols / kQuantBlock; ++b)
        EXPECT_EQ(back.scales[r * stored_blocks + b], p.scales[r * stored_blocks + b]) << to_string(f);
  }
  auto odd = pack(torch::randn({2, 40}), WeightFormat::kQ8);
  std::vector<uint8_t> blocks(200);
  EXPECT_THROW(to_ggml_rows(odd.view(), 0, 2, blocks.data()), std::invalid_argument);
}

TEST(Matvec, ErrorsNameTheProblem) {
  auto x = torch::randn({17, 64});
  MatvecInput in;
  EXPECT_THROW(prepare_input(in, WeightFormat::kQ8, x.data_ptr<float>(), 17, 64), std::invalid_argument);
  EXPECT_THROW(prepare_input(in, WeightFormat::kQ8, x.data_ptr<float>(), 0, 64), std::invalid_argument);
  prepare_input(in, WeightFormat::kQ8, x.data_ptr<float>(), 2, 64);
  auto p = pack(torch::randn({4, 64}), WeightFormat::kQ4);
  float y[8];
  try {
    matvec(p.view(), in, y, 4, 0, 4);
    ADD_FAILURE() << "a q8 input passed to q4 weights";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("int8"), std::string::npos) << e.what();
  }
  try {
    (void)weight_format("q5_1");
    ADD_FAILURE();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("q5_1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(weight_format("int4"), WeightFormat::kQ4);
  EXPECT_THROW(matvec_use("avx1024"), std::invalid_argument);
}

}  // namespace
}  // namespace colossal::kernels::cpu
