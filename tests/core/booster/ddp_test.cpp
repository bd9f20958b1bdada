// DDP against a single process on the global batch (same seed, same data): losses every step and
// parameters after training within relative 1e-5 (fp32).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_training.h"

namespace colossal::booster {
namespace {

using namespace colossal::testing;

Trace train_ddp(const TrainOptions& o, DDPPlugin::Options plugin_options = {}) {
  return train_boosted(std::make_shared<DDPPlugin>(plugin_options), o);
}

TEST(DDP, TwoRanksMatchOneProcess) {
  testing::run_ranks(2, [] { expect_close(train_ddp({}), train_single({})); });
}

TEST(DDP, FourRanksMatchOneProcessWithSmallBuckets) {
  // 512-byte buckets: several buckets, launched in order while backward runs.
  DDPPlugin::Options opts;
  opts.bucket_bytes = 512;
  testing::run_ranks(4, [opts] { expect_close(train_ddp({}, opts), train_single({})); });
}

TEST(DDP, NoSyncAccumulationEqualsOneBigBatch) {
  TrainOptions o;
  o.micro_batches = 2;
  testing::run_ranks(2, [o] { expect_close(train_ddp(o), train_single({})); });
}

TEST(DDP, ClippingMatchesOneProcess) {
  TrainOptions o;
  o.clip = 0.05;  // small enough to clip every step
  testing::run_ranks(2, [o] {
    auto got = train_ddp(o);
    auto want = train_single(o);
    for (double n : want.norms) EXPECT_GT(n, o.clip) << "the test must actually clip";
    expect_close(got, want);
  });
}

TrainOptions with_unused_branch() {
  TrainOptions o;
  o.unused_branch = true;
  o.weight_decay = 0;  // an unused parameter then stays put, as in the reference
  return o;
}

TEST(DDP, UnusedParameterIsNamed) {
  testing::run_ranks(2, [] {
    auto o = with_unused_branch();
    auto msg = testing::error_message_of([&] { train_ddp(o); });
    EXPECT_NE(msg.find("these parameters got no gradient in this step: unused.bias, unused.weight"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  });
}

TEST(DDP, UnusedParameterAllowedMatchesOneProcess) {
  testing::run_ranks(2, [] {
    auto o = with_unused_branch();
    DDPPlugin::Options allow;
    allow.find_unused_parameters = true;
    expect_close(train_ddp(o, allow), train_single(o));
  });
}

TEST(DDP, GradientsAreViewsIntoBuckets) {
  testing::run_ranks(2, [] {
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    Booster booster(make_plugin("ddp"));
    auto b = booster.boost(model.ptr(), opt);
    // zero_grad drops the gradients (set to none, as PyTorch does by default); backward then
    // lands each one in its bucket view.
    b.optimizer->zero_grad();
    auto params = model->parameters();
    for (const auto& p : params) EXPECT_FALSE(p.grad().defined());
    booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
    // Parameters are stored in reverse order in the buckets: fc2.bias's gradient comes first.
    const float* first = params.back().grad().data_ptr<float>();
    const float* second = params[params.size() - 2].grad().data_ptr<float>();
    EXPECT_EQ(second, first + params.back().numel()) << "gradients must be adjacent bucket views";
    auto once = params.back().grad().clone();
    // A second backward without zero_grad accumulates in the bucket.
    booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
    EXPECT_TRUE(torch::allclose(params.back().grad(), 2 * once));
    // Resetting gradients behind the Booster's back is repaired in the next backward.
    model->zero_grad();
    auto loss = model->forward(torch::ones({2, kIn})).sum();
    booster.backward(loss, *b.optimizer);
    EXPECT_EQ(params.back().grad().data_ptr<float>(), first);
  });
}

TEST(Booster, UnknownPluginListsTheKnownOnes) {
  auto msg = testing::error_message_of([] { make_plugin("zero9"); });
  EXPECT_NE(msg.find("unknown plugin 'zero9' (known: ddp, zero, zero1, zero2, gemini, zero3, hybrid"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::booster
