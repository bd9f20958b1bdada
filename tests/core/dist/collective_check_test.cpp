// COLOSSAL_CHECK_COLLECTIVES=1: members that call different collectives all raise at once,
// naming what each called, instead of hanging or summing the wrong things.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::dist {
namespace {

testing::RankLaunchOptions checked(int world) {
  testing::RankLaunchOptions o;
  o.world_size = world;
  o.env["COLOSSAL_CHECK_COLLECTIVES"] = "1";
  return o;
}

// Runs `body` on every rank and expects it to throw, on every rank, a message holding each of `parts`.
void expect_mismatch(int world, const std::function<void()>& body, const std::vector<std::string>& parts) {
  testing::run_ranks(world, [&] {
    // Matching collectives pass and give the right answer.
    auto ok = torch::ones({3});
    {
      CollectiveLabel label("warm-up");
      all_reduce(ok, world_group());
    }
    EXPECT_TRUE(torch::equal(ok, torch::full({3}, static_cast<float>(world_size()))));
    const auto msg = testing::error_message_of(body);
    EXPECT_NE(msg.find("the members called different collectives (COLOSSAL_CHECK_COLLECTIVES)"), std::string::npos)
        << msg;
    for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' in: " << msg;
  }, checked(world));
}

TEST(CollectiveCheck, AShapeMismatchIsNamedOnEveryRank) {
  for (int world : {2, 4}) {
    expect_mismatch(world, [world] {
      CollectiveLabel label("grad sync");
      auto t = torch::ones({rank() == world - 1 ? 8 : 4});  // the last rank's bucket is larger
      all_reduce(t, world_group());
    }, {"collective #1 on group 'world'", "rank 0: all_reduce(sum) [4] Float at 'grad sync'",
        "rank " + std::to_string(world - 1) + ": all_reduce(sum) [8] Float at 'grad sync'"});
  }
}

TEST(CollectiveCheck, AnOperationMismatchIsNamedOnEveryRank) {
  for (int world : {2, 4}) {
    expect_mismatch(world, [] {
      auto t = torch::ones({4});
      if (rank() == 1) broadcast(t, 0, world_group());
      else all_reduce(t, world_group(), ReduceOp::kMax);
    }, {"rank 0: all_reduce(max) [4] Float", "rank 1: broadcast(from 0) [4] Float"});
  }
}

// Rank 1 skips a collective and goes on to the next one: caught at the first call they disagree on.
TEST(CollectiveCheck, AMissingCallIsCaughtAtTheNextCollective) {
  for (int world : {2, 4}) {
    expect_mismatch(world, [] {
      auto t = torch::ones({4});
      if (rank() != 1) {
        CollectiveLabel label("loss average");
        all_reduce(t, world_group(), ReduceOp::kAvg);
      }
      barrier(world_group());
    }, {"collective #1", "rank 0: all_reduce(avg) [4] Float at 'loss average'", "rank 1: barrier"});
  }
}

}  // namespace
}  // namespace colossal::dist
