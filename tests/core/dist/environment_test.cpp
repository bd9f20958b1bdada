#include "core/dist/environment.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>

#include "core/common/check.h"

namespace colossal::dist {
namespace {

const char* kVars[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                       "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                       "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID", "SLURM_NTASKS",
                       "SLURM_LOCALID", "SLURM_NNODES", "SLURM_NTASKS_PER_NODE", "SLURM_NODEID",
                       "SLURM_LAUNCH_NODE_IPADDR"};

// Restores the launcher variables when it goes out of scope, however the scope is left.
struct SavedLauncherEnv {
  std::map<std::string, std::optional<std::string>> saved;
  SavedLauncherEnv() {
    for (const char* v : kVars) {
      const char* old = std::getenv(v);
      saved[v] = old ? std::optional<std::string>(old) : std::nullopt;
    }
  }
  ~SavedLauncherEnv() {
    for (const auto& [k, v] : saved) v ? ::setenv(k.c_str(), v->c_str(), 1) : ::unsetenv(k.c_str());
  }
};

// Runs fn with exactly `vars` set among the launcher variables, restoring them afterwards.
void with_env(const std::map<std::string, std::string>& vars, const std::function<void()>& fn) {
  SavedLauncherEnv restore;
  for (const char* v : kVars) ::unsetenv(v);
  for (const auto& [k, v] : vars) ::setenv(k.c_str(), v.c_str(), 1);
  fn();
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  std::string msg = "<no exception>";
  with_env(vars, [&] {
    try {
      DistEnvironment::from_process_environment();
    } catch (const std::exception& e) {
      msg = error_text(e);
    }
  });
  return msg;
}

TEST(DistEnvironment, NoVariablesIsAWorldOfOne) {
  with_env({}, [] {
    auto e = DistEnvironment::from_process_environment();
    EXPECT_EQ(e.world_size, 1);
    EXPECT_EQ(e.rank, 0);
    EXPECT_EQ(e.source, "none");
  });
}

TEST(DistEnvironment, TorchrunVariables) {
  with_env({{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
            {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"},
            {"TORCHELASTIC_USE_AGENT_STORE", "True"}, {"TORCHELASTIC_RESTART_COUNT", "2"}},
           [] {
             auto e = DistEnvironment::from_process_environment();
             EXPECT_EQ(e.source, "torchrun");
             EXPECT_EQ(e.rank, 5);
             EXPECT_EQ(e.world_size, 8);
             EXPECT_EQ(e.local_rank, 1);
             EXPECT_EQ(e.local_world_size, 4);
             EXPECT_EQ(e.node_rank, 1);
             EXPECT_EQ(e.master_addr, "10.1.2.3");
             EXPECT_EQ(e.master_port, 1234);
             EXPECT_TRUE(e.store_hosted_by_launcher);
             EXPECT_EQ(e.restart_count, 2);
           });
}

TEST(DistEnvironment, SlurmVariables) {
  with_env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "4"}, {"SLURM_LOCALID", "1"},
            {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}, {"MASTER_ADDR", "node-a"},
            {"MASTER_PORT", "29555"}},
           [] {
             auto e = DistEnvironment::from_process_environment();
             EXPECT_EQ(e.source, "slurm");
             EXPECT_EQ(e.rank, 3);
             EXPECT_EQ(e.world_size, 4);
             EXPECT_EQ(e.local_rank, 1);
             EXPECT_EQ(e.local_world_size, 2);
             EXPECT_EQ(e.node_rank, 1);
             EXPECT_EQ(e.master_addr, "node-a");
           });
}

TEST(DistEnvironment, BadValuesNameTheVariable) {
  EXPECT_NE(error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}}).find("expected 0 <= RANK < WORLD_SIZE, got RANK=4 WORLD_SIZE=4"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "x"}, {"WORLD_SIZE", "4"}}).find("RANK: expected an integer, got 'x'"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}}).find("RANK and WORLD_SIZE must be set together"),
            std::string::npos);
  EXPECT_NE(error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}})
                .find("expected 0 < MASTER_PORT < 65536, got 70000"),
            std::string::npos);
  EXPECT_NE(error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).find("set MASTER_ADDR"),
            std::string::npos);
}

}  // namespace
}  // namespace colossal::dist
