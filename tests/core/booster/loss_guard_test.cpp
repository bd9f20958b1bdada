// The guard that stops a run on a NaN/Inf loss: every rank stops at the same step, named.
#include "core/booster/loss_guard.h"

#include <gtest/gtest.h>

#include <limits>

#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(LossGuard, EveryRankStopsAtTheStepOneRankSawNaN) {
  testing::run_ranks(2, [] {
    LossGuard guard({.precision = "bf16", .advice = "Checkpoints in ckpt are as they were"});
    EXPECT_TRUE(guard.check(2.5, 1.0, 1));
    EXPECT_FALSE(guard.stop_requested());
    // A stop asked of rank 1 alone (a signal) reaches every rank through the same exchange.
    EXPECT_TRUE(guard.check(2.4, 1.0, 2, /*stop_asked=*/dist::rank() == 1));
    EXPECT_TRUE(guard.stop_requested()) << "rank " << dist::rank();
    // Rank 1's loss is NaN; rank 0's is fine, and still stops: the ranks must not drift apart.
    auto msg = testing::error_message_of([&] { guard.check(dist::rank() == 1 ? kNaN : 2.3, 1.0, 3); });
    EXPECT_NE(msg.find(dist::rank() == 1 ? "[train] step 3: the loss is NaN"
                                         : "[train] step 3: the loss or the gradients are not finite"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("(seen on rank 1)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("stopped before the optimizer step"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Checkpoints in ckpt are as they were"), std::string::npos) << msg;
    // A finite loss with NaN gradients (a learning rate far too high) stops the run too.
    LossGuard again({});
    msg = testing::error_message_of([&] { again.check(2.2, kNaN, 4); });
    EXPECT_NE(msg.find("step 4: the gradient norm is NaN (loss 2.2) (seen on rank 0, 1)"), std::string::npos) << msg;
  });
}

TEST(LossGuard, Fp16ToleratesAFewOverflowsThenStops) {
  LossGuard guard({.precision = "fp16", .max_fp16_skips = 2});
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(guard.check(inf, 1.0, 1)) << "the scaler skips this step";
  EXPECT_TRUE(guard.check(1.0, 1.0, 2)) << "a finite loss resets the count";
  EXPECT_FALSE(guard.check(1.0, inf, 3));
  EXPECT_FALSE(guard.check(inf, 1.0, 4));
  auto msg = testing::error_message_of([&] { guard.check(inf, 1.0, 5); });
  EXPECT_NE(msg.find("step 5: the loss is Inf for 3 steps in a row"), std::string::npos) << msg;
  // fp32 stops at once.
  LossGuard strict({});
  EXPECT_NE(testing::error_message_of([&] { strict.check(kNaN, 1.0, 7); }).find("step 7: the loss is NaN"),
            std::string::npos);
}

}  // namespace
}  // namespace colossal::booster
