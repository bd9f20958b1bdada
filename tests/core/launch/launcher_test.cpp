// The `colossal run` binary, driven as a user drives it, with shell one-liners as ranks.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/launch/hostfile.h"
#include "core/launch/launcher.h"
#include "core/common/check.h"
#include "core/dist/net.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::launch {
namespace {

struct RunResult {
  int status = 0;
  double seconds = 0;
  std::string out;
  std::string err;
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string colossal_bin() { return testing::binary_dir() + "/colossal"; }

// A `colossal` process started with its output going to files.
struct Running {
  pid_t pid = -1;
  std::string out_path, err_path;
  std::chrono::steady_clock::time_point start;
};

Running start_colossal(const std::vector<std::string>& args) {
  static int counter = 0;
  std::string base = ::testing::TempDir() + "launcher_" + std::to_string(::getpid()) + "_" +
                     std::to_string(counter++);
  Running run{-1, base + ".out", base + ".err", std::chrono::steady_clock::now()};
  pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(run.out_path.c_str(), "w", stdout);
    std::freopen(run.err_path.c_str(), "w", stderr);
    std::vector<std::string> full = {colossal_bin()};
    full.insert(full.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : full) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  run.pid = pid;
  return run;
}

// What the launcher and its ranks are doing: every process of the tree, each thread's state
// and kernel wait, and (where gdb is installed) user-space stacks of the ones not stopped.
std::string snapshot_process_tree(pid_t root) {
  // First every thread's state (cheap), then the stacks: gdb pauses each process it attaches to.
  const std::string script =
      "tree() { echo $1; for c in $(ps -o pid= --ppid $1); do tree $c; done; }; "
      "procs=$(tree " + std::to_string(root) + "); "
      "for p in $procs; do "
      "  ps -o pid=,ppid=,stat=,etime=,args= -p $p; "
      "  for t in /proc/$p/task/*; do echo \"   thread $(basename $t) $(cat $t/comm) "
      "state=$(cut -d' ' -f3 $t/stat) wchan=$(cat $t/wchan)\"; done; "
      "done 2>/dev/null; "
      "command -v gdb >/dev/null && for p in $procs; do "
      "  case $(cut -d' ' -f3 /proc/$p/stat 2>/dev/null) in T|t|'') continue;; esac; "
      "  echo \"--- stacks of $p\"; "
      "  timeout 20 gdb -p $p -batch -ex 'thread apply all bt 14' 2>/dev/null | grep -E '^(#|Thread)'; "
      "done";
  std::string out;
  if (FILE* f = ::popen(script.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    ::pclose(f);
  }
  return out;
}

// Waits for the launcher, at most limit_s: a launcher that never ends fails the test with what it
// printed and a snapshot of its process tree instead of stalling the suite until CTest kills it.
RunResult finish(const Running& run, double limit_s = 150) {
  RunResult r;
  auto deadline = run.start + std::chrono::milliseconds(static_cast<int64_t>(limit_s * 1000));
  while (::waitpid(run.pid, &r.status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::string snapshot = snapshot_process_tree(run.pid);
      ::kill(run.pid, SIGKILL);  // its ranks die with it (PR_SET_PDEATHSIG)
      ::waitpid(run.pid, &r.status, 0);
      r.err += "\n=== colossal still running after " + std::to_string(limit_s) + " s; killed. Process tree:\n" +
               snapshot + "===\n";
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - run.start).count();
  r.out = slurp(run.out_path);
  r.err = slurp(run.err_path) + r.err;
  return r;
}

// Runs `colossal ARGS`; `during` runs while it is alive (given its pid).
RunResult run_colossal(const std::vector<std::string>& args,
                       const std::function<void(pid_t)>& during = nullptr) {
  Running run = start_colossal(args);
  if (during) during(run.pid);
  return finish(run);
}

std::string describe(const RunResult& r) {
  return "exit " + std::to_string(r.exit_code()) + " after " + std::to_string(r.seconds) +
         " s\n--- stdout ---\n" + r.out + "--- stderr ---\n" + r.err;
}

TEST(Launcher, RanksGetTheTorchrunVariablesAndPrefixedOutput) {
  auto r = run_colossal({"run", "--nproc_per_node", "3", "--", "sh", "-c",
                         "echo \"R=$RANK W=$WORLD_SIZE L=$LOCAL_RANK LW=$LOCAL_WORLD_SIZE "
                         "G=$GROUP_RANK A=$MASTER_ADDR P=$MASTER_PORT S=$TORCHELASTIC_USE_AGENT_STORE "
                         "T=$OMP_NUM_THREADS\"; echo err$RANK >&2"});
  ASSERT_EQ(r.exit_code(), 0) << describe(r);
  for (int i = 0; i < 3; ++i) {
    std::string line = "[rank " + std::to_string(i) + "] R=" + std::to_string(i) + " W=3 L=" +
                       std::to_string(i) + " LW=3 G=0 A=127.0.0.1 P=";
    EXPECT_NE(r.out.find(line), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find("[rank " + std::to_string(i) + "] err" + std::to_string(i)),
              std::string::npos)
        << describe(r);
  }
  EXPECT_NE(r.out.find("S=True"), std::string::npos);
  EXPECT_EQ(r.out.find("P=0 "), std::string::npos) << "a real port must replace 0";
  EXPECT_EQ(r.out.find("T= "), std::string::npos) << "OMP_NUM_THREADS must be set";
}

TEST(Launcher, UserThreadSettingIsKept) {
  ::setenv("OMP_NUM_THREADS", "7", 1);
  auto r = run_colossal({"run", "--nproc_per_node", "2", "--", "sh", "-c", "echo T=$OMP_NUM_THREADS"});
  ::unsetenv("OMP_NUM_THREADS");
  EXPECT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.out.find("[rank 1] T=7"), std::string::npos) << describe(r);
}

TEST(Launcher, FailingRankStopsTheOthersWithOneSummaryLine) {
  auto r = run_colossal({"run", "--nproc_per_node", "3", "--", "sh", "-c",
                         "if [ $RANK = 1 ]; then sleep 0.3; exit 3; fi; sleep 60"});
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_LT(r.seconds, 20) << "the sleeping ranks must be stopped";
  EXPECT_NE(r.err.find("colossal run: FAILED: rank 1 (node 0, local rank 1) failed with exit code 3"),
            std::string::npos)
      << describe(r);
  int summaries = 0;
  for (size_t p = r.err.find("colossal run: FAILED"); p != std::string::npos;
       p = r.err.find("colossal run: FAILED", p + 1))
    ++summaries;
  EXPECT_EQ(summaries, 1);
}

// A rank that exits 0 while another keeps running (a missed collective, typically) is not waited
// on silently: the launcher names who finished and who still runs, and --finish_timeout ends it.
TEST(Launcher, RanksLeftRunningAfterOneFinishedAreNamedAndStopped) {
  auto r = run_colossal({"run", "--nproc_per_node", "2", "--finish_timeout", "12", "--", "sh", "-c",
                         "if [ $RANK = 1 ]; then sleep 60; fi"});
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_LT(r.seconds, 30) << describe(r);
  // After 10 s: who finished, who still runs.
  EXPECT_NE(r.err.find("rank 0 (node 0, local rank 0) finished "), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find(" s ago; still running: rank 1 (node 0, local rank 1)"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("rank 1 (node 0, local rank 1) still running 12 s after rank 0 (node 0, local rank 0) finished "
                       "(--finish_timeout)"),
            std::string::npos)
      << describe(r);
}

TEST(Launcher, RankKilledBySignalIsReported) {
  auto r = run_colossal({"run", "--nproc_per_node", "2", "--", "sh", "-c",
                         "if [ $RANK = 0 ]; then kill -9 $$; fi; sleep 60"});
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_NE(r.err.find("rank 0 (node 0, local rank 0) failed with signal 9"), std::string::npos)
      << describe(r);
}

TEST(Launcher, MaxRestartsRestartsTheWholeGroup) {
  // Fails on attempts 0 and 1 (rank 1 only), succeeds on attempt 2.
  auto r = run_colossal({"run", "--nproc_per_node", "2", "--max_restarts", "2", "--", "sh", "-c",
                         "echo attempt=$TORCHELASTIC_RESTART_COUNT; "
                         "if [ $RANK = 1 ] && [ $TORCHELASTIC_RESTART_COUNT -lt 2 ]; then exit 5; fi"});
  EXPECT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.err.find("restarting all ranks (restart 1 of 2)"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("restarting all ranks (restart 2 of 2)"), std::string::npos) << describe(r);
  EXPECT_NE(r.out.find("[rank 0] attempt=2"), std::string::npos) << describe(r);
}

TEST(Launcher, RestartsRunOut) {
  auto r = run_colossal({"run", "--nproc_per_node", "2", "--max_restarts", "1", "--", "sh", "-c",
                         "exit 4"});
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_NE(r.err.find("failed with exit code 4; stopped the other ranks (after 1 restarts)"),
            std::string::npos)
      << describe(r);
}

void expect_signal_forwarded(int sig) {
  std::string dir = ::testing::TempDir() + "sig" + std::to_string(sig) + "_" + std::to_string(::getpid());
  (void)!std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  std::string script = "trap 'echo got > " + dir + "/r$RANK; exit 0' " +
                       (sig == SIGINT ? "INT" : "TERM") +
                       "; touch " + dir + "/up$RANK; while true; do sleep 0.05; done";
  auto r = run_colossal({"run", "--nproc_per_node", "2", "--", "sh", "-c", script}, [&](pid_t pid) {
    // Wait until both ranks are up, then signal the launcher only.
    for (int i = 0; i < 400; ++i) {
      if (::access((dir + "/up0").c_str(), F_OK) == 0 && ::access((dir + "/up1").c_str(), F_OK) == 0)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ::kill(pid, sig);
  });
  EXPECT_EQ(r.exit_code(), 128 + sig) << describe(r);
  EXPECT_EQ(slurp(dir + "/r0"), "got\n") << "rank 0 did not receive the signal";
  EXPECT_EQ(slurp(dir + "/r1"), "got\n") << "rank 1 did not receive the signal";
  EXPECT_NE(r.err.find("interrupted by signal " + std::to_string(sig)), std::string::npos)
      << describe(r);
}

TEST(Launcher, ForwardsSigterm) { expect_signal_forwarded(SIGTERM); }
TEST(Launcher, ForwardsSigint) { expect_signal_forwarded(SIGINT); }

TEST(Launcher, TeeShowsOneRank) {
  auto r = run_colossal({"run", "--nproc_per_node", "3", "--tee", "1", "--", "sh", "-c", "echo hello$RANK"});
  EXPECT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.out.find("[rank 1] hello1"), std::string::npos) << describe(r);
  EXPECT_EQ(r.out.find("hello0"), std::string::npos) << describe(r);
  EXPECT_EQ(r.out.find("hello2"), std::string::npos) << describe(r);
  // A hidden rank that fails still says why: the end of its error output follows the summary.
  r = run_colossal({"run", "--nproc_per_node", "2", "--tee", "0", "--", "sh", "-c",
                    "if [ \"$RANK\" = 1 ]; then echo boom on rank one >&2; exit 3; fi; sleep 30"});
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_NE(r.err.find("rank 1 (node 0, local rank 1) failed; the end of its error output:\n  boom on rank one"),
            std::string::npos)
      << describe(r);
}

TEST(Launcher, BadInvocationsAreExplained) {
  auto none = run_colossal({"run", "--nproc_per_node", "2"});
  EXPECT_EQ(none.exit_code(), 2) << describe(none);
  EXPECT_NE(none.err.find("no program given"), std::string::npos) << describe(none);
  auto missing = run_colossal({"run", "--", "no-such-program-xyz"});
  EXPECT_NE(missing.exit_code(), 0);
  EXPECT_NE(missing.err.find("program 'no-such-program-xyz' not found on PATH"), std::string::npos)
      << describe(missing);
  auto bad_node = run_colossal({"run", "--nnodes", "2", "--node_rank", "2", "--", "true"});
  EXPECT_EQ(bad_node.exit_code(), 2);
  EXPECT_NE(bad_node.err.find("expected 0 <= node_rank < nnodes (2), got 2"), std::string::npos)
      << describe(bad_node);
}

TEST(Launcher, ConfigFileSuppliesOptionsAndFlagsWin) {
  std::string path = ::testing::TempDir() + "launch.yaml";
  std::ofstream(path) << "nproc_per_node: 3\ntee: 2\n";
  auto r = run_colossal({"run", "--config", path, "--tee", "0", "--", "sh", "-c", "echo n=$WORLD_SIZE"});
  EXPECT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.out.find("[rank 0] n=3"), std::string::npos) << describe(r);
  std::ofstream(path) << "nproc_per_nod: 3\n";
  auto bad = run_colossal({"run", "--config", path, "--", "true"});
  EXPECT_EQ(bad.exit_code(), 2);
  EXPECT_NE(bad.err.find("unknown key 'nproc_per_nod'"), std::string::npos) << describe(bad);
}

TEST(Launcher, RealDistributedJobUnderTheLauncher) {
  auto r = run_colossal({"run", "--nproc_per_node", "4", "--", testing::binary_dir() + "/dist_demo"});
  EXPECT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.out.find("[rank 0] all-reduce verified on 4 ranks: PASS"), std::string::npos)
      << describe(r);
}

TEST(Launcher, DeadRankInRealJobEndsEveryone) {
  // A real core/dist job where rank 2 is killed: the launcher stops the rest and says who.
  auto r = run_colossal({"run", "--nproc_per_node", "3", "--", "sh", "-c",
                         "if [ $RANK = 2 ]; then (sleep 1; kill -9 $$) & fi; exec " +
                             testing::binary_dir() + "/dist_demo --iterations 100000"});
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_NE(r.err.find("rank 2 (node 0, local rank 2) failed with signal 9"), std::string::npos)
      << describe(r);
  EXPECT_LT(r.seconds, 30);
}

// A frozen rank (stopped, so it neither answers nor exits) is found by its peers' monitor; the
// summary names the frozen rank and says who saw it, not just the witness that exited.
// The launcher's child whose environment says RANK=`rank`, or -1.
pid_t rank_process(pid_t launcher, int rank) {
  const std::string want = "RANK=" + std::to_string(rank);
  const std::string self = std::to_string(launcher);
  std::istringstream children(slurp("/proc/" + self + "/task/" + self + "/children"));
  for (std::string pid; children >> pid;) {
    std::string env = slurp("/proc/" + pid + "/environ");
    for (size_t at = 0; at < env.size();) {
      size_t end = env.find('\0', at);
      if (env.compare(at, end - at, want) == 0) return static_cast<pid_t>(std::stoi(pid));
      at = end == std::string::npos ? env.size() : end + 1;
    }
  }
  return -1;
}

// Rank 2 is frozen (SIGSTOP) mid-job, once rank 0 has printed the mesh: its peers' monitors see
// its heartbeat stop and the summary names rank 2, not the witness. The job may still be creating
// its data-parallel group then (groups are made on first use), so the freeze can land inside
// Gloo's connection set-up, whose store reads are watched too (core/dist/watched_store.h).
TEST(Launcher, FrozenRankIsNamedNotTheRankThatNoticed) {
  Running run = start_colossal({"run", "--nproc_per_node", "3", "--grace_period", "1", "--",
                                testing::binary_dir() + "/dist_demo", "--iterations", "100000"});
  pid_t frozen = -1;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(100);
  while (frozen < 0 && std::chrono::steady_clock::now() < deadline) {
    if (slurp(run.out_path).find("[rank 0]   rank 2 -> ") != std::string::npos) frozen = rank_process(run.pid, 2);
    if (frozen < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (frozen > 0) ::kill(frozen, SIGSTOP);
  auto frozen_at = std::chrono::steady_clock::now();
  if (frozen < 0) ::kill(run.pid, SIGKILL);
  RunResult r = finish(run);
  ASSERT_GT(frozen, 0) << "rank 2 never printed the mesh\n" << describe(r);
  EXPECT_EQ(r.exit_code(), 1) << describe(r);
  EXPECT_NE(r.err.find("colossal run: FAILED: rank 2 (node 0, local rank 2) stopped answering (rank 2 is gone "
                       "(no heartbeat for "),
            std::string::npos)
      << describe(r);
  EXPECT_NE(r.err.find("seen by rank "), std::string::npos) << describe(r);
  // Found by the heartbeat (dead after 10 s), not by the 60 s collective timeout.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen_at).count(), 45) << describe(r);
}

// Two launchers on this machine acting as nodes 0 and 1 of one job.
std::pair<RunResult, RunResult> run_two_nodes(const std::vector<std::string>& extra,
                                              const std::vector<std::string>& command) {
  int port = dist::find_free_port();
  auto args = [&](int node) {
    std::vector<std::string> a = {"run", "--nnodes", "2", "--node_rank", std::to_string(node),
                                  "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                                  "--master_port", std::to_string(port), "--rdzv_timeout", "30"};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("--");
    a.insert(a.end(), command.begin(), command.end());
    return a;
  };
  Running node0 = start_colossal(args(0));
  Running node1 = start_colossal(args(1));
  RunResult r1 = finish(node1);
  RunResult r0 = finish(node0);
  return {r0, r1};
}

TEST(LauncherMultiNode, TwoNodesRunOneJob) {
  auto [n0, n1] = run_two_nodes({}, {testing::binary_dir() + "/dist_demo"});
  EXPECT_EQ(n0.exit_code(), 0) << describe(n0);
  EXPECT_EQ(n1.exit_code(), 0) << describe(n1);
  EXPECT_NE(n0.out.find("[rank 0] all-reduce verified on 4 ranks: PASS"), std::string::npos)
      << describe(n0);
  EXPECT_NE(n1.err.find("[rank 3]"), std::string::npos) << "node 1 runs ranks 2 and 3\n" << describe(n1);
}

TEST(LauncherMultiNode, FailureOnOneNodeStopsTheOther) {
  auto [n0, n1] = run_two_nodes(
      {}, {"sh", "-c", "if [ $RANK = 3 ]; then sleep 0.5; exit 7; fi; sleep 60"});
  EXPECT_EQ(n1.exit_code(), 1) << describe(n1);
  EXPECT_EQ(n0.exit_code(), 1) << describe(n0);
  EXPECT_LT(n0.seconds, 30) << "node 0's sleeping ranks must be stopped";
  const std::string what = "rank 3 (node 1, local rank 1) failed with exit code 7";
  EXPECT_NE(n1.err.find(what), std::string::npos) << describe(n1);
  EXPECT_NE(n0.err.find(what + " on node 1"), std::string::npos) << describe(n0);
}

TEST(LauncherMultiNode, RestartsSpanAllNodes) {
  auto [n0, n1] = run_two_nodes(
      {"--max_restarts", "1"},
      {"sh", "-c",
       "echo attempt=$TORCHELASTIC_RESTART_COUNT; "
       "if [ $RANK = 2 ] && [ $TORCHELASTIC_RESTART_COUNT = 0 ]; then exit 9; fi"});
  EXPECT_EQ(n0.exit_code(), 0) << describe(n0);
  EXPECT_EQ(n1.exit_code(), 0) << describe(n1);
  EXPECT_NE(n0.out.find("[rank 0] attempt=1"), std::string::npos) << describe(n0);
  EXPECT_NE(n1.out.find("[rank 3] attempt=1"), std::string::npos) << describe(n1);
  EXPECT_NE(n0.err.find("restarting all ranks (restart 1 of 1)"), std::string::npos) << describe(n0);
}

TEST(Hostfile, ParsesHostsSlotsAndComments) {
  auto hosts = parse_hostfile_text("# cluster\nnode-a slots=4\n\n10.0.0.2   # second\n", "hf");
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].host, "node-a");
  EXPECT_EQ(hosts[0].slots, 4);
  EXPECT_EQ(hosts[1].host, "10.0.0.2");
  EXPECT_EQ(hosts[1].slots, 0);
  auto msg = [](const std::string& text) {
    return testing::error_message_of([&] { parse_hostfile_text(text, "hostfile 'h'"); });
  };
  EXPECT_NE(msg("a slots=x\n").find("line 1: expected slots=N"), std::string::npos);
  EXPECT_NE(msg("a\nb\na\n").find("line 3: host 'a' is listed twice"), std::string::npos);
  EXPECT_NE(msg("# nothing\n").find("lists no hosts"), std::string::npos);
}

TEST(Hostfile, OnlyTheAllowListReachesOtherHosts) {
  EXPECT_TRUE(forwarded_to_remote_hosts("COLOSSAL_LOG_LEVEL"));
  EXPECT_TRUE(forwarded_to_remote_hosts("NCCL_DEBUG"));
  EXPECT_TRUE(forwarded_to_remote_hosts("PATH"));
  EXPECT_FALSE(forwarded_to_remote_hosts("AWS_SECRET_ACCESS_KEY"));
  EXPECT_FALSE(forwarded_to_remote_hosts("SSH_AUTH_SOCK"));
  EXPECT_FALSE(forwarded_to_remote_hosts("RANK"));
}

TEST(Hostfile, LaunchesTheOtherNodesThroughSsh) {
  // A stand-in for ssh that runs the remote command on this machine records what it was asked.
  std::string dir = ::testing::TempDir() + "hf_" + std::to_string(::getpid());
  (void)!std::system(("rm -rf " + dir + " && mkdir -p " + dir).c_str());
  std::string fake_ssh = dir + "/fake_ssh";
  std::ofstream(fake_ssh) << "#!/bin/sh\nhost=$1; shift\necho \"$host $*\" >> " << dir
                          << "/ssh.log\nexec env -i sh -c \"$1\"\n";
  (void)!std::system(("chmod +x " + fake_ssh).c_str());
  std::string hostfile = dir + "/hosts";
  std::ofstream(hostfile) << "127.0.0.1 slots=2\nlocalhost slots=2\n";
  ::setenv("SECRET_TOKEN", "hunter2", 1);
  auto r = run_colossal({"run", "--hostfile", hostfile, "--ssh", fake_ssh, "--nproc_per_node", "2",
                         "--master_port", "0", "--", testing::binary_dir() + "/dist_demo"});
  ::unsetenv("SECRET_TOKEN");
  EXPECT_EQ(r.exit_code(), 0) << describe(r);
  EXPECT_NE(r.out.find("all-reduce verified on 4 ranks: PASS"), std::string::npos) << describe(r);
  std::string log = slurp(dir + "/ssh.log");
  EXPECT_NE(log.find("localhost "), std::string::npos) << log;
  EXPECT_NE(log.find("--node_rank 1"), std::string::npos) << log;
  EXPECT_EQ(log.find("hunter2"), std::string::npos) << "the environment leaked: " << log;
}

}  // namespace
}  // namespace colossal::launch
