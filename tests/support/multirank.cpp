#include "tests/support/multirank.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "core/common/check.h"
#include "core/dist/net.h"
#include "core/dist/runtime.h"

extern char** environ;

namespace colossal::testing {
namespace {

constexpr const char* kChildFlag = "COLOSSAL_TEST_RANK_PROCESS";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string self_path() {
  char buf[4096] = {0};
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

std::string current_test_filter() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return std::string(info->test_suite_name()) + "." + info->name();
}

struct Attempt {
  std::vector<RankResult> results;
  bool port_clash = false;
};

Attempt launch_once(const RankLaunchOptions& o, int port, const std::string& log_dir) {
  using Clock = std::chrono::steady_clock;
  std::vector<pid_t> pids(o.world_size, -1);
  std::vector<std::string> logs(o.world_size);
  auto start = Clock::now();
  std::string filter = "--gtest_filter=" + current_test_filter();
  std::string exe = self_path();
  for (int r = 0; r < o.world_size; ++r) {
    std::map<std::string, std::string> env;
    for (char** e = environ; e && *e; ++e) {
      std::string kv(*e);
      auto eq = kv.find('=');
      if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    // Short timeouts so a broken test fails in seconds; a test may override them.
    env["COLOSSAL_DIST_TIMEOUT"] = "30";
    env["COLOSSAL_HEARTBEAT_INTERVAL"] = "0.2";
    // Generous against false alarms on a loaded 2-core machine, short enough for quick tests.
    env["COLOSSAL_DEAD_AFTER"] = "4";
    env["OMP_NUM_THREADS"] = "1";
    for (const auto& [k, v] : o.env) env[k] = v;
    env[kChildFlag] = "1";
    env["RANK"] = std::to_string(r);
    env["WORLD_SIZE"] = std::to_string(o.world_size);
    env["LOCAL_RANK"] = std::to_string(r);
    env["LOCAL_WORLD_SIZE"] = std::to_string(o.world_size);
    env["MASTER_ADDR"] = "127.0.0.1";
    env["MASTER_PORT"] = std::to_string(port);
    env.erase("TORCHELASTIC_RESTART_COUNT");
    if (o.store_in_parent) env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    else env.erase("TORCHELASTIC_USE_AGENT_STORE");
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = {exe, filter, "--gtest_brief=0"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    logs[r] = log_dir + "/rank" + std::to_string(r) + ".log";
    int fd = ::open(logs[r].c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execve(exe.c_str(), argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(fd);
    pids[r] = pid;
  }

  Attempt a;
  a.results.resize(o.world_size);
  int running = o.world_size;
  auto deadline = start + std::chrono::milliseconds(static_cast<int64_t>(o.deadline_s * 1000));
  while (running > 0) {
    for (int r = 0; r < o.world_size; ++r) {
      if (pids[r] < 0) continue;
      int status = 0;
      if (::waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        a.results[r].status = status;
        a.results[r].seconds = std::chrono::duration<double>(Clock::now() - start).count();
        pids[r] = -1;
        --running;
      }
    }
    if (running > 0 && Clock::now() > deadline) {
      for (int r = 0; r < o.world_size; ++r) {
        if (pids[r] < 0) continue;
        ::kill(pids[r], SIGKILL);
        ::waitpid(pids[r], &a.results[r].status, 0);
        a.results[r].timed_out = true;
        a.results[r].seconds = o.deadline_s;
        pids[r] = -1;
        --running;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int r = 0; r < o.world_size; ++r) {
    a.results[r].rank = r;
    a.results[r].output = read_file(logs[r]);
    if (a.results[r].output.find("Address already in use") != std::string::npos) a.port_clash = true;
  }
  return a;
}

}  // namespace

bool RankResult::exited_with(int code) const {
  return !timed_out && WIFEXITED(status) && WEXITSTATUS(status) == code;
}
bool RankResult::killed_by(int sig) const { return WIFSIGNALED(status) && WTERMSIG(status) == sig; }

std::string RankResult::describe() const {
  std::ostringstream s;
  s << "rank " << rank << ": ";
  if (timed_out) s << "killed at the deadline";
  else if (WIFEXITED(status)) s << "exit code " << WEXITSTATUS(status);
  else if (WIFSIGNALED(status)) s << "signal " << WTERMSIG(status);
  s << " after " << seconds << " s\n----- output of rank " << rank << " -----\n" << output
    << "----- end of rank " << rank << " -----";
  return s.str();
}

bool is_rank_process() {
  const char* v = std::getenv(kChildFlag);
  return v != nullptr && std::string(v) == "1";
}

int test_rank() { return std::atoi(std::getenv("RANK") ? std::getenv("RANK") : "0"); }

std::vector<RankResult> launch_ranks(const RankLaunchOptions& options) {
  COLOSSAL_CHECK(!is_rank_process(), "launch_ranks() called inside a rank process");
  char tmpl[] = "/tmp/colossal-test-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  Attempt a;
  if (options.store_in_parent) {
    c10d::TCPStoreOptions so;
    so.port = 0;  // bound here, so no other process can take it in between
    so.isServer = true;
    so.waitWorkers = false;
    auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", so);
    a = launch_once(options, store->getPort(), dir);
  } else {
    for (int attempt = 0; attempt < 4; ++attempt) {
      a = launch_once(options, dist::find_free_port(), dir);
      if (!a.port_clash) break;
    }
  }
  std::string cleanup = "rm -rf '" + dir + "'";
  (void)!std::system(cleanup.c_str());
  return a.results;
}

void run_ranks(int world_size, const std::function<void()>& body, RankLaunchOptions options) {
  // A test may call run_ranks several times (phases with different world sizes); a rank process
  // re-runs the whole test, so it runs only the call that started it.
  static std::map<std::string, int> calls;
  int index = calls[current_test_filter()]++;
  if (is_rank_process()) {
    const char* want = std::getenv("COLOSSAL_TEST_RUN_INDEX");
    if (want != nullptr && std::atoi(want) != index) return;
    dist::init();
    body();
    dist::shutdown();
    return;
  }
  options.world_size = world_size;
  options.env["COLOSSAL_TEST_RUN_INDEX"] = std::to_string(index);
  auto results = launch_ranks(options);
  for (const auto& r : results) {
    EXPECT_TRUE(r.exited_with(0)) << r.describe();
  }
}

std::string binary_dir() { return COLOSSAL_TEST_BINARY_DIR; }

}  // namespace colossal::testing
