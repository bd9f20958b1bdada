// A dead or missing rank must end every other rank with a message naming the group, the
// operation and the missing rank, within the timeout: never a hang.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <cstdio>
#include <thread>
#include <unistd.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/multirank.h"

namespace colossal::dist {
namespace {

constexpr int kCaught = 3;  // exit code of a rank that caught the expected error

// Runs `collective` on every rank except `victim`, which runs `victim_action` instead; ranks
// that catch an error print it and exit kCaught.
void rank_body(int victim, const std::function<void()>& victim_action,
               const std::function<void()>& collective) {
  init();
  auto warm = torch::ones({4});
  all_reduce(warm, world_group());  // everyone is connected before the failure
  try {
    if (rank() == victim) {
      victim_action();
    } else {
      collective();
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "CAUGHT: %s\n", error_text(e).c_str());
    std::fflush(stderr);
    ::_exit(kCaught);
  }
  std::fprintf(stderr, "no error on rank %d\n", rank());
  std::fflush(stderr);
  ::_exit(0);
}

void expect_contains(const testing::RankResult& r, const std::string& text) {
  EXPECT_NE(r.output.find(text), std::string::npos) << "expected '" << text << "' in\n"
                                                    << r.describe();
}

TEST(MultiRankFailure, RankKilledDuringAllReduce) {
  constexpr double kTimeout = 20;
  if (testing::is_rank_process()) {
    rank_body(
        2,
        [] {
          // Start the all-reduce, then die in the middle of it.
          auto t = torch::ones({1 << 22});
          auto h = all_reduce_async(t, world_group());
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          ::raise(SIGKILL);
        },
        [] {
          auto t = torch::ones({1 << 22});
          all_reduce(t, world_group());
        });
    return;
  }
  testing::RankLaunchOptions o;
  o.world_size = 4;
  o.env["COLOSSAL_DIST_TIMEOUT"] = std::to_string(kTimeout);
  auto results = testing::launch_ranks(o);
  EXPECT_TRUE(results[2].killed_by(SIGKILL)) << results[2].describe();
  for (int r : {0, 1, 3}) {
    EXPECT_TRUE(results[r].exited_with(kCaught)) << results[r].describe();
    EXPECT_LT(results[r].seconds, kTimeout) << "must end within the timeout";
    expect_contains(results[r], "all_reduce #1 on group 'world'");
    expect_contains(results[r], "rank 2 is gone");
  }
}

TEST(MultiRankFailure, RankThatNeverArrivesTimesOutWithItsName) {
  constexpr double kTimeout = 3;
  if (testing::is_rank_process()) {
    rank_body(
        1, [] { std::this_thread::sleep_for(std::chrono::seconds(6)); },
        [] {
          auto t = torch::ones({16});
          all_reduce(t, world_group());
        });
    return;
  }
  testing::RankLaunchOptions o;
  o.world_size = 3;
  o.env["COLOSSAL_DIST_TIMEOUT"] = std::to_string(kTimeout);
  auto results = testing::launch_ranks(o);
  for (int r : {0, 2}) {
    EXPECT_TRUE(results[r].exited_with(kCaught)) << results[r].describe();
    EXPECT_LT(results[r].seconds, kTimeout + 6) << "timeout plus the diagnosis window";
    expect_contains(results[r], "all_reduce #1 on group 'world'");
    expect_contains(results[r], "timed out after 3 s");
    expect_contains(results[r], "rank 1 is alive but has not reached collective #1");
  }
}

TEST(MultiRankFailure, FailedRankIsNamedOnSubgroupAndOtherGroupsLearn) {
  // Rank 3 fails (throws) in a collective of its own pair group; rank 2, its partner, is told
  // at once, and ranks 0 and 1, waiting on the world group, learn that rank 3 failed.
  if (testing::is_rank_process()) {
    init();
    Group pair = new_group(rank() < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, "pair");
    try {
      if (rank() == 3) {
        auto bad = torch::ones({3});
        auto out = torch::empty({1});
        reduce_scatter(out, bad, pair);  // wrong size: throws before any communication
      }
      auto t = torch::ones({8});
      all_reduce(t, rank() >= 2 ? pair : world_group());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "CAUGHT: %s\n", error_text(e).c_str());
      std::fflush(stderr);
      // What a real program does with an error: report it and exit; peers see it go.
      if (rank() == 3) ::_exit(kCaught + 1);
      ::_exit(kCaught);
    }
    ::_exit(0);
  }
  testing::RankLaunchOptions o;
  o.world_size = 4;
  o.env["COLOSSAL_DIST_TIMEOUT"] = "15";
  auto results = testing::launch_ranks(o);
  EXPECT_TRUE(results[3].exited_with(kCaught + 1)) << results[3].describe();
  expect_contains(results[3], "reduce_scatter: input has 3 elements");
  expect_contains(results[2], "all_reduce #0 on group 'pair'");
  expect_contains(results[2], "rank 3");
  for (int r : {0, 1}) {
    EXPECT_TRUE(results[r].exited_with(kCaught)) << results[r].describe();
    EXPECT_LT(results[r].seconds, 15.0);
    expect_contains(results[r], "on group 'world'");
    expect_contains(results[r], "rank 3");
  }
}

TEST(MultiRankFailure, RankThatNeverStartsIsNamedAtInit) {
  if (testing::is_rank_process()) {
    if (testing::test_rank() == 1) ::_exit(0);  // never joins
    try {
      init();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "CAUGHT: %s\n", error_text(e).c_str());
      std::fflush(stderr);
      ::_exit(kCaught);
    }
    ::_exit(0);
  }
  testing::RankLaunchOptions o;
  o.world_size = 2;
  o.env["COLOSSAL_DIST_TIMEOUT"] = "3";
  auto results = testing::launch_ranks(o);
  EXPECT_TRUE(results[0].exited_with(kCaught)) << results[0].describe();
  EXPECT_LT(results[0].seconds, 3 + 6.0);
  expect_contains(results[0], "creating group 'world' (2 ranks: 0,1) with gloo failed");
  expect_contains(results[0], "rank 1 never joined the job");
}

TEST(MultiRankFailure, StoreHostDeathIsReported) {
  if (testing::is_rank_process()) {
    rank_body(
        0, [] { ::raise(SIGKILL); },
        [] {
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          auto t = torch::ones({16});
          all_reduce(t, world_group());
        });
    return;
  }
  testing::RankLaunchOptions o;
  o.world_size = 2;
  o.store_in_parent = false;  // rank 0 hosts the store, as with bare torchrun variables
  o.env["COLOSSAL_DIST_TIMEOUT"] = "15";
  auto results = testing::launch_ranks(o);
  EXPECT_TRUE(results[0].killed_by(SIGKILL)) << results[0].describe();
  EXPECT_TRUE(results[1].exited_with(kCaught)) << results[1].describe();
  EXPECT_LT(results[1].seconds, 15.0);
  expect_contains(results[1], "all_reduce #1 on group 'world'");
  expect_contains(results[1], "the rendezvous store is unreachable");
}

}  // namespace
}  // namespace colossal::dist
