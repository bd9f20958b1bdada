#pragma once
// Multi-rank tests with real processes: the test binary re-executes itself once per rank with
// --gtest_filter=<this test> and the torchrun variables set (rendezvous over Gloo on 127.0.0.1,
// a free port; retried when the port was taken in between). Each run has a deadline: ranks
// still running then are killed and reported, never waited on forever.
//
//   TEST(MultiRankCollectives, AllReduce) {
//     colossal::testing::run_ranks(4, [] {
//       auto t = torch::ones({8});
//       colossal::dist::all_reduce(t, colossal::dist::world_group());
//       EXPECT_TRUE(torch::all(t == 4).item<bool>());
//     });
//   }
//
// In the parent, run_ranks fails the test with the failing ranks' own output. In a rank process
// it initialises core/dist, runs the body and shuts down; gtest's verdict becomes the exit code.
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace colossal::testing {

struct RankResult {
  int rank = 0;
  int status = 0;           // waitpid status
  bool timed_out = false;
  double seconds = 0;       // from launch to exit
  std::string output;       // stdout and stderr, interleaved
  bool exited_with(int code) const;
  bool killed_by(int sig) const;
  std::string describe() const;
};

struct RankLaunchOptions {
  int world_size = 2;
  double deadline_s = 90;
  // Extra environment for the ranks (on top of short test timeouts, see multirank.cpp).
  std::map<std::string, std::string> env;
  // Host the rendezvous store in the test process, as `colossal run` and torchrun do; false
  // makes rank 0 host it (plain torchrun-variable launches without an agent store).
  bool store_in_parent = true;
};

/// True inside a rank process started by the harness.
bool is_rank_process();
/// This rank process's rank (only meaningful when is_rank_process()).
int test_rank();

/// Parent side: starts the ranks of the current test and collects their results.
std::vector<RankResult> launch_ranks(const RankLaunchOptions& options);

/// Runs `body` on `world_size` ranks; in the parent, expects every rank to exit 0.
void run_ranks(int world_size, const std::function<void()>& body, RankLaunchOptions options = {});

/// Directory holding the project's built binaries (colossal, dist_demo).
std::string binary_dir();

}  // namespace colossal::testing
