// ZeRO stages 1 and 2 against a single process on the global batch (same seed, same data) and
// against DDP: losses every step, gradient norms and parameters after training within relative
// 1e-5 (fp32).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/booster/plugins/low_level_zero/low_level_zero_plugin.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_training.h"

namespace colossal::zero {
namespace {

using namespace colossal::testing;
using booster::LowLevelZeroPlugin;

Trace train_zero(const TrainOptions& o, LowLevelZeroPlugin::Options z) {
  return train_boosted(std::make_shared<LowLevelZeroPlugin>(z), o);
}

LowLevelZeroPlugin::Options stage(int s, int64_t bucket_elements = 12'000'000) {
  LowLevelZeroPlugin::Options z;
  z.stage = s;
  z.bucket_bytes = bucket_elements * 4;
  return z;
}

TEST(LowLevelZero, StagesOneAndTwoOnTwoRanksMatchOneProcess) {
  testing::run_ranks(2, [] {
    auto want = train_single({});
    expect_close(train_zero({}, stage(1)), want);
    expect_close(train_zero({}, stage(2)), want);
  });
}

TEST(LowLevelZero, StagesOneAndTwoOnFourRanksWithSmallBucketsMatchOneProcess) {
  // 40-element buckets: several buckets per backward, and parameters (fc2.bias: 3 elements)
  // smaller than the rank count, so some ranks own nothing of them.
  testing::run_ranks(4, [] {
    auto want = train_single({});
    expect_close(train_zero({}, stage(1, 40)), want);
    expect_close(train_zero({}, stage(2, 40)), want);
  });
}

TEST(LowLevelZero, UnusedLayerMatchesOneProcess) {
  TrainOptions o;
  o.unused_branch = true;
  o.weight_decay = 0;  // an unused parameter then stays put, as in the reference
  testing::run_ranks(2, [o] {
    auto want = train_single(o);
    expect_close(train_zero(o, stage(1, 64)), want);
    expect_close(train_zero(o, stage(2, 64)), want);
  });
}

TEST(LowLevelZero, GradientAccumulationWithAndWithoutNoSync) {
  testing::run_ranks(2, [] {
    auto want = train_single({});
    for (bool no_sync : {true, false}) {
      TrainOptions o;
      o.micro_batches = 2;
      o.accumulate_with_no_sync = no_sync;
      for (int s : {1, 2}) {
        SCOPED_TRACE("stage " + std::to_string(s) + (no_sync ? " no_sync" : " synchronised"));
        expect_close(train_zero(o, stage(s, 64)), want);
      }
    }
  });
}

TEST(LowLevelZero, ClippingMatchesOneProcess) {
  TrainOptions o;
  o.clip = 0.05;
  testing::run_ranks(4, [o] {
    auto want = train_single(o);
    for (double n : want.norms) EXPECT_GT(n, o.clip) << "the test must actually clip";
    expect_close(train_zero(o, stage(1, 64)), want);
    expect_close(train_zero(o, stage(2, 64)), want);
  });
}

TEST(LowLevelZero, CpuOffloadKeepsSeparateMastersAndMatches) {
  testing::run_ranks(2, [] {
    auto z = stage(2);
    z.cpu_offload = true;
    TrainOptions o;
    o.clip = 0.05;
    expect_close(train_zero(o, z), train_single(o));
  });
}

TEST(LowLevelZero, OptimizerStateCoversOnlyTheOwnedShard) {
  testing::run_ranks(2, [] {
    auto model = make_model(7);
    int64_t total = 0;
    for (const auto& p : model->parameters()) total += p.numel();
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<LowLevelZeroPlugin>(stage(2)));
    auto b = booster.boost(model.ptr(), opt);
    b.optimizer->zero_grad();
    booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
    for (const auto& p : model->parameters())
      EXPECT_FALSE(p.grad().defined()) << "stage 2 must not keep full gradients";
    b.optimizer->step();
    int64_t held = 0;
    for (const auto& g : opt->param_groups())
      for (const auto& p : g.params()) {
        auto* s = dynamic_cast<torch::optim::AdamWParamState*>(
            opt->state().at(p.unsafeGetTensorImpl()).get());
        ASSERT_NE(s, nullptr);
        held += s->exp_avg().numel();
      }
    auto t = torch::tensor({held}, torch::kInt64);
    dist::all_reduce(t, dist::world_group());
    EXPECT_EQ(t.item<int64_t>(), total) << "the shards cover every element exactly once";
    EXPECT_LE(held, total / 2 + 8) << "each rank holds about half";
  });
}

TEST(LowLevelZero, MixedPrecisionMatchesDDPMixedPrecision) {
  testing::run_ranks(2, [] {
    for (const char* precision : {"bf16", "fp16"}) {
      SCOPED_TRACE(precision);
      booster::DDPPlugin::Options d;
      d.precision = precision;
      auto want = train_boosted(std::make_shared<booster::DDPPlugin>(d), {});
      for (int s : {1, 2}) {
        auto z = stage(s);
        z.precision = precision;
        auto got = train_zero({}, z);
        for (size_t i = 0; i < want.losses.size(); ++i)
          EXPECT_NEAR(got.losses[i], want.losses[i], 2e-2 * std::abs(want.losses[i])) << "step " << i;
      }
    }
  });
}

// bf16 with FusedAdamW: the reduced bf16 gradient shard goes to the optimizer as it is and its
// pass rewrites this rank's part of the working copy, which the all-gather then spreads. The run
// follows the one with torch::optim::AdamW (fp32 gradients, update, copy) step for step; with
// clipping that scales, too (the shard is made fp32 first).
TEST(LowLevelZero, Bf16FusedAdamWWritesTheWorkingShardInItsPass) {
  testing::run_ranks(2, [] {
    for (int s : {1, 2}) {
      for (double clip : {0.0, 1e-2}) {
        SCOPED_TRACE("stage " + std::to_string(s) + ", clip " + std::to_string(clip));
        auto z = stage(s);
        z.precision = "bf16";
        TrainOptions plain;
        plain.clip = clip;
        auto want = train_zero(plain, z);
        TrainOptions fused = plain;
        fused.fused_adamw = true;
        auto got = train_zero(fused, z);
        for (size_t i = 0; i < want.losses.size(); ++i)
          EXPECT_NEAR(got.losses[i], want.losses[i], 1e-3 * std::abs(want.losses[i])) << "step " << i;
        for (size_t i = 0; i < want.params.size(); ++i)
          EXPECT_TRUE(torch::allclose(got.params[i].to(torch::kFloat), want.params[i].to(torch::kFloat), 1e-2, 1e-3))
              << "parameter " << i;
      }
    }
  });
}

TEST(LowLevelZero, Bf16CommunicationKeepsFp32Masters) {
  testing::run_ranks(2, [] {
    auto z = stage(2);
    z.communication_dtype = "bf16";
    auto got = train_zero({}, z);
    auto want = train_single({});
    for (size_t i = 0; i < want.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 1e-2 * std::abs(want.losses[i])) << "step " << i;
    for (const auto& p : got.params) EXPECT_EQ(p.scalar_type(), torch::kFloat32);
  });
}

TEST(LowLevelZero, BadOptionsAreNamed) {
  auto msg = error_message_of([] {
    LowLevelZeroPlugin::Options z;
    z.stage = 3;
    LowLevelZeroPlugin p(z);
  });
  EXPECT_NE(msg.find("stage: expected 1 or 2, got 3"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::zero
