// Mixed precision: the loss scaler's schedule, fp16 overflow agreed on by every rank, and bf16
// DDP training staying close to the fp32 single-process reference.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/amp/loss_scaler.h"
#include "core/amp/precision.h"
#include "core/booster/booster.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/fused_adamw.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal {
namespace {

TEST(LossScaler, DefaultsFollowTheSpecifiedSchedule) {
  amp::DynamicLossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(true));   // first overflow: hysteresis 2 absorbs it
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_FALSE(s.update(true));   // second: back off by half
  EXPECT_EQ(s.scale(), 32768.0);
  for (int i = 0; i < 999; ++i) EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 32768.0);
  EXPECT_TRUE(s.update(false));   // the 1000th good step grows it
  EXPECT_EQ(s.scale(), 65536.0);
}

TEST(LossScaler, ClampsAndRoundTripsItsState) {
  amp::DynamicLossScaler s({.initial_scale = 2, .growth_interval = 1, .hysteresis = 1,
                            .min_scale = 1, .max_scale = 4});
  s.update(true);
  s.update(true);
  EXPECT_EQ(s.scale(), 1.0) << "never below min_scale";
  for (int i = 0; i < 5; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 4.0) << "never above max_scale";
  amp::DynamicLossScaler copy({.initial_scale = 2, .growth_interval = 1, .hysteresis = 1,
                               .min_scale = 1, .max_scale = 4});
  copy.load_state_dict(s.state_dict());
  EXPECT_EQ(copy.scale(), s.scale());
  EXPECT_EQ(copy.good_steps(), s.good_steps());
  auto msg = testing::error_message_of([] { amp::DynamicLossScaler({.backoff_factor = 2}); });
  EXPECT_NE(msg.find("backoff_factor: expected in (0, 1), got 2"), std::string::npos) << msg;
}

TEST(Precision, NamesAndTheComputeRule) {
  EXPECT_EQ(amp::parse_precision("bf16"), amp::Precision::kBf16);
  EXPECT_EQ(amp::parse_precision("fp8"), amp::Precision::kFp8);
  EXPECT_EQ(amp::low_precision_dtype(amp::Precision::kFp8), c10::kBFloat16) << "fp8 runs the rest as bf16";
  EXPECT_NE(testing::error_message_of([] { amp::parse_precision("fp4"); })
                .find("expected fp32, bf16, fp16 or fp8, got 'fp4'"),
            std::string::npos);
  EXPECT_EQ(amp::compute_dtype(amp::Precision::kFp32, c10::Device(c10::kCPU)), c10::kFloat);
  EXPECT_EQ(amp::compute_dtype(amp::Precision::kBf16, c10::Device(c10::kCUDA, 0)),
            c10::kBFloat16);
  auto cpu_bf16 = amp::compute_dtype(amp::Precision::kBf16, c10::Device(c10::kCPU));
  EXPECT_EQ(cpu_bf16, amp::cpu_has_native(c10::kBFloat16) ? c10::kBFloat16 : c10::kFloat);
  ::setenv("COLOSSAL_CPU_COMPUTE", "fp32", 1);
  EXPECT_EQ(amp::compute_dtype(amp::Precision::kBf16, c10::Device(c10::kCPU)), c10::kFloat);
  ::unsetenv("COLOSSAL_CPU_COMPUTE");
}

torch::nn::Sequential make_net() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(8, 16), torch::nn::GELU(),
                               torch::nn::Linear(16, 2));
}

TEST(MixedPrecisionDDP, Fp16OverflowOnOneRankSkipsTheStepEverywhere) {
  testing::run_ranks(2, [] {
    auto net = make_net();
    auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
    booster::DDPPlugin::Options o;
    o.precision = "fp16";
    o.loss_scaler.growth_interval = 3;
    booster::Booster booster(std::make_shared<booster::DDPPlugin>(o));
    auto b = booster.boost(net.ptr(), opt);
    torch::manual_seed(10 + dist::rank());
    auto x = torch::randn({4, 8}).to(b.compute_dtype);
    auto before = net->parameters()[0].detach().clone();
    std::vector<double> scales;
    std::vector<bool> stepped;
    for (int step = 0; step < 6; ++step) {
      b.optimizer->zero_grad();
      auto loss = net->forward(x).to(torch::kFloat32).pow(2).mean();
      // Steps 0 and 1: rank 1 alone produces an infinite gradient.
      if (step < 2 && dist::rank() == 1) loss = loss * std::numeric_limits<float>::infinity();
      booster.backward(loss, *b.optimizer);
      stepped.push_back(b.optimizer->step());
      scales.push_back(booster.plugin().precision() == "fp16" ? b.optimizer->model_wrapper().hooks().loss_scale() : 0);
      if (step == 1) {
        EXPECT_TRUE(torch::equal(net->parameters()[0].detach(), before))
            << "no rank may update after an overflow anywhere";
      }
    }
    EXPECT_EQ(stepped, (std::vector<bool>{false, false, true, true, true, true}));
    // Hysteresis 2: the first overflow keeps 2^16, the second halves it; 3 good steps grow it.
    EXPECT_EQ(scales, (std::vector<double>{65536, 32768, 32768, 32768, 65536, 65536}));
    EXPECT_FALSE(torch::equal(net->parameters()[0].detach(), before)) << "good steps must train";
    EXPECT_EQ(net->parameters()[0].scalar_type(), b.compute_dtype);
  });
}

TEST(MixedPrecisionDDP, Bf16TrainingFollowsTheFp32Reference) {
  testing::run_ranks(2, [] {
    torch::manual_seed(99);
    auto xs = torch::randn({5, 8, 8});
    auto ys = torch::randn({5, 8, 2});
    // fp32, one process, global batch.
    auto ref = make_net();
    torch::optim::AdamW ref_opt(ref->parameters(), torch::optim::AdamWOptions(1e-2));
    std::vector<double> ref_losses;
    for (int s = 0; s < 5; ++s) {
      ref_opt.zero_grad();
      auto loss = torch::mse_loss(ref->forward(xs[s]), ys[s]);
      loss.backward();
      ref_opt.step();
      ref_losses.push_back(loss.item<double>());
    }
    // bf16 DDP on 2 ranks.
    auto net = make_net();
    auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
    booster::DDPPlugin::Options o;
    o.precision = "bf16";
    booster::Booster booster(std::make_shared<booster::DDPPlugin>(o));
    auto b = booster.boost(net.ptr(), opt);
    int r = dist::rank();
    for (int s = 0; s < 5; ++s) {
      b.optimizer->zero_grad();
      auto out = net->forward(xs[s].narrow(0, 4 * r, 4).to(b.compute_dtype)).to(torch::kFloat32);
      auto loss = torch::mse_loss(out, ys[s].narrow(0, 4 * r, 4));
      booster.backward(loss, *b.optimizer);
      EXPECT_TRUE(b.optimizer->step());
      auto l = loss.detach().to(torch::kFloat64).reshape({1});
      dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
      // bf16 keeps ~3 significant digits: the trajectory stays within a few percent.
      EXPECT_NEAR(l.item<double>(), ref_losses[s], 0.03 * ref_losses[s]) << "step " << s;
    }
  });
}

// bf16 with FusedAdamW hands the bf16 working gradients to the optimizer, whose one pass updates
// the fp32 master and rewrites the working copy. That must be bit for bit the plain sequence:
// convert the gradient to fp32, clip (the norm reported the same), update, round the master to
// bf16. Steps alternate between no clipping and a clip that scales, on 2 ranks with equal data
// (so the averaged gradient is each rank's own and the plain sequence needs no collective).
TEST(MixedPrecisionDDP, Bf16FusedUpdateIsBitwiseTheConvertUpdateCopySequence) {
  if (amp::compute_dtype(amp::Precision::kBf16, c10::Device(c10::kCPU)) != c10::kBFloat16)
    GTEST_SKIP() << "this CPU computes bf16 in fp32";
  testing::run_ranks(2, [] {
    torch::manual_seed(5);
    auto xs = torch::randn({4, 8, 8}).to(torch::kBFloat16);
    auto ys = torch::randn({4, 8, 2});
    auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.1);
    // The plain sequence, written out: bf16 model, fp32 masters with their own FusedAdamW.
    auto plain = make_net();
    std::vector<torch::Tensor> masters;
    for (auto& p : plain->parameters()) masters.push_back(p.detach().clone().requires_grad_(true));
    for (auto& p : plain->parameters()) p.set_data(p.detach().to(torch::kBFloat16));
    optim::FusedAdamW plain_opt(masters, options);
    // The booster's.
    auto net = make_net();
    auto opt = std::make_shared<optim::FusedAdamW>(net->parameters(), options);
    booster::DDPPlugin::Options o;
    o.precision = "bf16";
    booster::Booster booster(std::make_shared<booster::DDPPlugin>(o));
    auto b = booster.boost(net.ptr(), opt);
    for (int s = 0; s < 4; ++s) {
      const double max_norm = s % 2 ? 1e-3 : std::numeric_limits<double>::infinity();
      plain->zero_grad();
      torch::mse_loss(plain->forward(xs[s]).to(torch::kFloat32), ys[s]).backward();
      auto params = plain->parameters();
      for (size_t i = 0; i < params.size(); ++i) masters[i].mutable_grad() = params[i].grad().to(torch::kFloat32);
      double plain_norm = torch::nn::utils::clip_grad_norm_(masters, max_norm);
      plain_opt.step();
      {
        torch::NoGradGuard no_grad;
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(masters[i]);
      }
      b.optimizer->zero_grad();
      booster.backward(torch::mse_loss(net->forward(xs[s]).to(torch::kFloat32), ys[s]), *b.optimizer);
      double norm = booster.clip_grad_norm(*b.optimizer, max_norm);
      EXPECT_EQ(norm, plain_norm) << "step " << s;
      EXPECT_TRUE(b.optimizer->step());
      auto mine = net->parameters();
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_TRUE(torch::equal(mine[i], params[i])) << "working parameter " << i << ", step " << s;
        EXPECT_TRUE(torch::equal(b.optimizer->inner().param_groups()[0].params()[i], masters[i]))
            << "master " << i << ", step " << s;
      }
    }
  });
}

}  // namespace
}  // namespace colossal
