#include "core/optim/fused_adamw.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "kernels/cpu/adamw.h"

namespace colossal::optim {
namespace {

namespace kc = colossal::kernels::cpu;

// Sizes with tails for an 8-wide vector loop, and one large enough to be split across threads.
const std::vector<int64_t> kSizes = {1, 7, 8, 9, 31, 1023, 100003};

torch::optim::AdamWOptions options() {
  return torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1);
}

void expect_rel_close(const torch::Tensor& got, const torch::Tensor& want, const std::string& what) {
  auto diff = (got - want).abs();
  auto tol = want.abs() * 1e-6 + 1e-9;
  auto bad = (diff > tol).sum().item<int64_t>();
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << want.numel()
                    << " elements beyond 1e-6 relative; max abs diff " << diff.max().item<double>();
}

void run_fp32_against_torch() {
  for (int64_t n : kSizes) {
    torch::manual_seed(n);
    auto init = torch::randn({n});
    auto mine = init.clone().requires_grad_(true);
    auto ref = init.clone().requires_grad_(true);
    FusedAdamW fused({mine}, options());
    torch::optim::AdamW plain({ref}, options());
    for (int step = 0; step < 6; ++step) {
      auto g = torch::randn({n}) * (step + 1);
      mine.mutable_grad() = g.clone();
      ref.mutable_grad() = g.clone();
      fused.step();
      plain.step();
    }
    expect_rel_close(mine.detach(), ref.detach(), "fp32 n=" + std::to_string(n));
    // The state is torch's own: moments agree too.
    auto& s_mine = static_cast<torch::optim::AdamWParamState&>(
        *fused.state().at(mine.unsafeGetTensorImpl()));
    auto& s_ref = static_cast<torch::optim::AdamWParamState&>(
        *plain.state().at(ref.unsafeGetTensorImpl()));
    EXPECT_EQ(s_mine.step(), s_ref.step());
    expect_rel_close(s_mine.exp_avg_sq(), s_ref.exp_avg_sq(), "exp_avg_sq n=" + std::to_string(n));
  }
}

// Every implementation this CPU runs (AVX-512, AVX2, scalar) against torch, one after another.
TEST(FusedAdamW, EveryImplementationMatchesTorchAdamWFp32) {
  auto names = kc::adamw_implementations();
  EXPECT_EQ(names.back(), "scalar");
  for (const auto& name : names) {
    auto previous = kc::adamw_use(name);
    EXPECT_EQ(kc::adamw_implementation(), name);
    SCOPED_TRACE(name);
    run_fp32_against_torch();
    kc::adamw_use(previous);
  }
  EXPECT_THROW(kc::adamw_use("avx1024"), std::invalid_argument);
}

// The vector paths give the scalar path's bits, the tails (n not a multiple of the width) included.
TEST(FusedAdamW, VectorPathsAreBitwiseTheScalarPath) {
  for (const auto& name : kc::adamw_implementations()) {
    for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{16}, int64_t{37}, int64_t{1000}}) {
      torch::manual_seed(7 + n);
      auto p = torch::randn({n}), g = torch::randn({n}) * 3, m = torch::randn({n}) * 0.1, v = torch::rand({n});
      auto p2 = p.clone(), m2 = m.clone(), v2 = v.clone();
      kc::AdamWStep s{.lr = 1e-2, .weight_decay = 0.1, .step = 3};
      auto previous = kc::adamw_use(name);
      kc::adamw_fp32(p.data_ptr<float>(), m.data_ptr<float>(), v.data_ptr<float>(), g.data_ptr<float>(), n, s);
      kc::adamw_use("scalar");
      kc::adamw_fp32(p2.data_ptr<float>(), m2.data_ptr<float>(), v2.data_ptr<float>(), g.data_ptr<float>(), n, s);
      kc::adamw_use(previous);
      EXPECT_TRUE(torch::equal(p, p2) && torch::equal(m, m2) && torch::equal(v, v2)) << name << " n=" << n;
    }
  }
}

TEST(FusedAdamW, Bf16WorkingParametersWithFp32Master) {
  for (const auto& name : kc::adamw_implementations()) {
    auto previous = kc::adamw_use(name);
    for (int64_t n : kSizes) {
      torch::manual_seed(100 + n);
      auto master = torch::randn({n});
      auto working = master.to(torch::kBFloat16);
      auto m = torch::zeros({n}), v = torch::zeros({n});
      auto ref = master.clone().requires_grad_(true);
      torch::optim::AdamW plain({ref}, options());
      for (int step = 1; step <= 5; ++step) {
        auto g16 = (torch::randn({n}) * step).to(torch::kBFloat16);
        fused_adamw_update(master, m, v, g16, working, options(), step);
        ref.mutable_grad() = g16.to(torch::kFloat32);
        plain.step();
      }
      std::string what = name +
                         " bf16 n=" + std::to_string(n);
      expect_rel_close(master, ref.detach(), what);
      EXPECT_TRUE(torch::equal(working, master.to(torch::kBFloat16)))
          << what << ": the working copy must be the master rounded to bf16";
    }
    kc::adamw_use(previous);
  }
}

TEST(FusedAdamW, Bf16RoundingIsNearestEven) {
  namespace d = kc::detail;
  EXPECT_EQ(d::float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties go to the even one (1.0).
  EXPECT_EQ(d::float_to_bf16(1.0f + 1.0f / 256), 0x3f80);
  EXPECT_EQ(d::float_to_bf16(1.0f + 3.0f / 256), 0x3f82);
  EXPECT_TRUE(std::isnan(d::bf16_to_float(d::float_to_bf16(std::nanf("")))));
  EXPECT_TRUE(std::isinf(d::bf16_to_float(d::float_to_bf16(INFINITY))));
}

TEST(FusedAdamW, RejectsWhatItCannotDo) {
  auto p = torch::zeros({4}, torch::kFloat64).requires_grad_(true);
  FusedAdamW opt({p}, options());
  p.mutable_grad() = torch::ones({4}, torch::kFloat64);
  try {
    opt.step();
    FAIL() << "float64 must be rejected";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("expected a contiguous Float tensor on cpu"),
              std::string::npos)
        << e.what_without_backtrace();
  }
  EXPECT_THROW(FusedAdamW({torch::zeros({1}, torch::requires_grad())},
                          torch::optim::AdamWOptions().amsgrad(true)),
               c10::Error);
}

}  // namespace
}  // namespace colossal::optim
