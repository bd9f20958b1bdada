// The communication profiler counts what a DDP step really sends: one all-reduce of every
// gradient byte per step, split into the plugin's buckets; a call overlapped with compute shows as
// hidden; with the profiler off nothing is recorded.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <thread>

#include "core/booster/booster.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/dist/collectives.h"
#include "core/dist/comm_profile.h"
#include "core/dist/runtime.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_training.h"

namespace colossal::dist {
namespace {

using namespace colossal::testing;

// One DDP training step on the toy model; returns the gradient bytes it had to reduce.
int64_t one_ddp_step(int64_t bucket_bytes) {
  auto model = make_model(7);
  auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
  booster::DDPPlugin::Options o;
  o.bucket_bytes = bucket_bytes;
  booster::Booster booster(std::make_shared<booster::DDPPlugin>(o));
  auto b = booster.boost(model.ptr(), opt);
  comm_profile::reset();  // what boost() sent (the parameter broadcast) is not part of a step
  b.optimizer->zero_grad();
  booster.backward(model->forward(torch::ones({4, kIn}) * (rank() + 1)).sum(), *b.optimizer);
  b.optimizer->step();
  int64_t bytes = 0;
  for (const auto& p : model->parameters()) bytes += static_cast<int64_t>(p.nbytes());
  return bytes;
}

TEST(CommProfile, ADdpStepReducesEveryGradientByteOnce) {
  testing::run_ranks(2, [] {
    comm_profile::set_enabled(true);
    const int64_t gradient_bytes = one_ddp_step(/*bucket_bytes=*/512);
    auto steps = comm_profile::steps();
    ASSERT_EQ(steps.size(), 1u) << comm_profile::format_summary();
    int64_t reduced = 0, calls = 0;
    for (const auto& [key, t] : steps[0].table) {
      if (key.second != "all_reduce") continue;
      reduced += t.bytes;
      calls += t.calls;
      EXPECT_GE(t.hidden_fraction(), 0.0);
      EXPECT_LE(t.hidden_fraction(), 1.0);
      EXPECT_GT(t.seconds, 0.0);
    }
    EXPECT_EQ(reduced, gradient_bytes) << comm_profile::format_summary();
    EXPECT_GE(calls, 2) << "512-byte buckets split the toy model's gradients\n" << comm_profile::format_summary();
    EXPECT_NE(comm_profile::format_summary().find("all_reduce"), std::string::npos);
    comm_profile::set_enabled(false);
  });
}

TEST(CommProfile, OffRecordsNothing) {
  testing::run_ranks(2, [] {
    comm_profile::set_enabled(false);
    comm_profile::reset();
    one_ddp_step(25 << 20);
    EXPECT_TRUE(comm_profile::steps().empty());
    EXPECT_TRUE(comm_profile::current().empty());
  });
}

TEST(CommProfile, ACallOverlappedWithComputeIsHidden) {
  testing::run_ranks(2, [] {
    comm_profile::set_enabled(true);
    comm_profile::reset();
    auto t = torch::ones({1024});
    barrier(world_group());  // both members launch together: the call itself takes little time
    auto h = all_reduce_async(t, world_group());
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // "compute" while it runs
    h.wait();
    comm_profile::end_step();
    all_reduce(t, world_group());  // waited on at once: nothing to hide behind
    comm_profile::end_step();
    auto steps = comm_profile::steps();
    ASSERT_EQ(steps.size(), 2u);
    const auto& overlapped = steps[0].table.at({world_group().name(), "all_reduce"});
    const auto& blocking = steps[1].table.at({world_group().name(), "all_reduce"});
    EXPECT_EQ(overlapped.calls, 1);
    EXPECT_EQ(overlapped.bytes, 1024 * 4);
    // The call is charged until the transport completed it, not until the late wait.
    EXPECT_LT(overlapped.seconds, 0.25) << comm_profile::format_summary();
    EXPECT_GT(overlapped.hidden_fraction(), 0.5) << comm_profile::format_summary();
    EXPECT_LT(blocking.hidden_fraction(), 0.5) << comm_profile::format_summary();
    comm_profile::set_enabled(false);
  });
}

}  // namespace
}  // namespace colossal::dist
