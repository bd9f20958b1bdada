#include "core/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/cuda.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/common/check.h"
#include "core/common/env.h"
#include "core/common/fs.h"
#include "core/dist/monitor.h"
#include "core/dist/net.h"
#include "core/launch/child_process.h"
#include "core/launch/error_file.h"
#include "core/launch/hostfile.h"

namespace colossal::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<int> g_signal{0};
int g_wake_pipe[2] = {-1, -1};

void on_signal(int sig) {
  g_signal.store(sig);
  if (g_wake_pipe[1] >= 0) {
    char c = 1;
    (void)!::write(g_wake_pipe[1], &c, 1);
  }
}

void install_signal_handlers() {
  if (g_wake_pipe[0] < 0) {
    COLOSSAL_CHECK(::pipe2(g_wake_pipe, O_CLOEXEC | O_NONBLOCK) == 0, "[launch] pipe() failed");
  }
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN));
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += (c == '\'') ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string to_string(const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); }
std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// One process the launcher watches: a local rank, or (hostfile mode) the ssh session running
// another node's launcher.
struct Proc {
  std::string label;        // "rank 3 (node 0, local rank 3)" or "node 1 (host b)"
  int global_rank = -1;     // -1: another node's launcher
  bool remote_launcher = false;  // watched for failure; its exit does not end an attempt
  Child child;
  bool running = false;
  int status = 0;
  LinePrefixer out;
  LinePrefixer err;
  Proc(std::string l, std::string prefix, bool show)
      : label(std::move(l)), out(prefix, STDOUT_FILENO, show), err(prefix, STDERR_FILENO, show) {}
  void start(const SpawnSpec& spec);
  void close_output();
};

bool failed(int status) { return !(WIFEXITED(status) && WEXITSTATUS(status) == 0); }


void set_nonblocking(int fd) {
  if (fd >= 0) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
}

void Proc::start(const SpawnSpec& spec) {
  child = spawn_child(spec);
  set_nonblocking(child.stdout_fd);
  set_nonblocking(child.stderr_fd);
  running = true;
}

// Flushes partial lines and closes the pipes (grandchildren may still hold their ends open).
void Proc::close_output() {
  for (int* fd : {&child.stdout_fd, &child.stderr_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  out.flush();
  err.flush();
}

// Reads whatever is available; closes the fd at EOF.
void drain(int& fd, LinePrefixer& sink) {
  if (fd < 0) return;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      sink.feed(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EINTR)) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    sink.flush();
    ::close(fd);
    fd = -1;
    return;
  }
}

class Launcher {
 public:
  explicit Launcher(LaunchOptions o) : opts_(std::move(o)) {}
  int run();

 private:
  struct Outcome {
    bool ok = true;
    int interrupted = 0;   // signal number
    std::string summary;   // the one line printed on failure
  };

  void setup_store();
  void prepare_remote_nodes();
  void join_attempt(int attempt);
  // Elastic membership (--nnodes MIN:MAX): joins the round open for joining and waits until it
  // closes; sets this round's node count and this node's rank, and returns the round (the
  // attempt). A node late for a round waits for that round's group to end and joins the next.
  // nullopt: the job finished before this node could join.
  std::optional<int> join_elastic_round();
  void close_elastic_round(int round);
  void end_elastic_round(int round, bool ok);
  bool elastic() const { return opts_.min_nnodes > 0; }
  std::string round_key(int round, const std::string& what) const {
    return "elastic/" + std::to_string(round) + "/" + what;
  }
  int64_t store_int(const std::string& k, int64_t fallback);
  std::vector<std::unique_ptr<Proc>> start_attempt(int attempt);
  Outcome watch(std::vector<std::unique_ptr<Proc>>& procs, int attempt);
  bool wait_for_other_nodes(int attempt, Outcome& outcome);
  // What a rank published when its collective or group creation failed, if anything.
  std::optional<dist::PublishedFailure> published_failure(int global_rank, int attempt);
  void finish_remote_launchers(std::vector<std::unique_ptr<Proc>>& remotes, Outcome& outcome);
  std::optional<std::string> remote_failure(int attempt);
  std::map<std::string, std::string> rank_environment(int global, int local, int attempt) const;
  std::string key(int attempt, const std::string& what) const {
    return "launcher/" + std::to_string(attempt) + "/" + what;
  }
  // Where a rank writes its fatal error (torchrun's TORCHELASTIC_ERROR_FILE), one per attempt.
  std::string error_file(int attempt, int global_rank) const {
    return c10::str(error_dir_, "/attempt_", attempt, "_rank_", global_rank, ".json");
  }
  // The first line of what the rank wrote there, if anything.
  std::optional<std::string> recorded_error(int attempt, int global_rank) const;
  int world_size() const { return opts_.nnodes * opts_.nproc_per_node; }
  bool multi_node() const { return opts_.nnodes > 1; }

  LaunchOptions opts_;
  int port_ = 0;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::vector<HostEntry> remote_hosts_;  // hostfile mode: nodes 1..N-1
  std::map<std::string, std::string> base_env_;
  std::string error_dir_;  // a private temporary directory, removed at exit
  bool hosts_store_ = false;
  int max_nnodes_ = 1;     // elastic: the most nodes a round takes (opts_.nnodes is this round's count)
  Clock::time_point failed_at_{};  // elastic: when the last round failed, for the recovery time
};

std::optional<std::string> Launcher::recorded_error(int attempt, int global_rank) const {
  if (global_rank < 0 || error_dir_.empty()) return std::nullopt;
  auto record = read_error_file(error_file(attempt, global_rank));
  if (!record || record->message.empty()) return std::nullopt;
  std::string line = record->message.substr(0, record->message.find('\n'));
  if (line.size() > 400) line = line.substr(0, 400) + "...";
  return line;
}

void Launcher::setup_store() {
  c10d::TCPStoreOptions so;
  so.isServer = opts_.node_rank == 0;
  // Elastic: node ranks are given out by the rendezvous, so the launcher on the endpoint's host
  // hosts the store (the first one there: a second launcher on that host finds the port taken
  // and joins as a client, as torchrun's c10d rendezvous does).
  if (elastic()) so.isServer = dist::is_local_host(opts_.master_addr);
  so.waitWorkers = false;
  so.timeout = std::chrono::milliseconds(static_cast<int64_t>(opts_.rdzv_timeout_s * 1000));
  int port = opts_.master_port;
  if (port < 0) port = multi_node() ? 29500 : 0;
  so.port = static_cast<uint16_t>(port);
  try {
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(opts_.master_addr, so);
    } catch (const std::exception&) {
      if (!(elastic() && so.isServer)) throw;
      so.isServer = false;
      store_ = c10::make_intrusive<c10d::TCPStore>(opts_.master_addr, so);
    }
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[launch] ", so.isServer ? "cannot host" : "cannot reach",
                  " the rendezvous store at ", opts_.master_addr, ":", port, ": ", error_text(e),
                  so.isServer ? " (is the port in use? pass --master_port 0 for a free one)" : "");
  }
  port_ = store_->getPort();
  hosts_store_ = so.isServer;
}

void Launcher::prepare_remote_nodes() {
  if (opts_.hostfile.empty()) {
    if (opts_.master_addr.empty()) opts_.master_addr = "127.0.0.1";
    return;
  }
  auto hosts = parse_hostfile(opts_.hostfile);
  if (opts_.master_addr.empty()) opts_.master_addr = hosts[0].host;
  for (const auto& h : hosts) {
    COLOSSAL_CHECK(h.slots == 0 || h.slots == opts_.nproc_per_node, "[launch] hostfile '",
                   opts_.hostfile, "' line ", h.line, ": slots=", h.slots,
                   " differs from --nproc_per_node ", opts_.nproc_per_node,
                   " (every node runs the same number of ranks)");
  }
  opts_.nnodes = static_cast<int>(hosts.size());
  remote_hosts_.assign(hosts.begin() + 1, hosts.end());
}

std::map<std::string, std::string> Launcher::rank_environment(int global, int local,
                                                              int attempt) const {
  auto env = base_env_;
  env["RANK"] = std::to_string(global);
  env["WORLD_SIZE"] = std::to_string(world_size());
  env["LOCAL_RANK"] = std::to_string(local);
  env["LOCAL_WORLD_SIZE"] = std::to_string(opts_.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(opts_.node_rank);
  env["ROLE_RANK"] = std::to_string(global);
  env["MASTER_ADDR"] = opts_.master_addr;
  env["MASTER_PORT"] = std::to_string(port_);
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(opts_.max_restarts);
  env["TORCHELASTIC_ERROR_FILE"] = error_file(attempt, global);
  if (!env.count("OMP_NUM_THREADS")) {
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, available_cores() / opts_.nproc_per_node));
  }
  return env;
}

void Launcher::join_attempt(int attempt) {
  if (!multi_node()) return;
  store_->add(key(attempt, "joined"), 1);
  auto deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts_.rdzv_timeout_s * 1000));
  for (;;) {
    int64_t joined = store_->add(key(attempt, "joined"), 0);
    if (joined >= opts_.nnodes) return;
    COLOSSAL_CHECK(Clock::now() < deadline, "[launch] only ", joined, " of ", opts_.nnodes,
                   " nodes joined attempt ", attempt, " within ", opts_.rdzv_timeout_s, " s");
    COLOSSAL_CHECK(g_signal.load() == 0, "[launch] interrupted while waiting for other nodes");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

int64_t Launcher::store_int(const std::string& k, int64_t fallback) {
  if (!store_->check({k})) return fallback;
  return std::stoll(to_string(store_->get(k)));
}

void Launcher::close_elastic_round(int round) {
  auto wait_ms = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };
  // The round opens once the group of the one before has stopped (a node joining while a group
  // trains waits for its next restart).
  while (round > 0 && !store_->check({round_key(round - 1, "ended")})) {
    COLOSSAL_CHECK(g_signal.load() == 0, "[launch] interrupted while waiting for the running group to restart");
    wait_ms(100);
  }
  const auto opened = Clock::now();
  auto waited = [&] { return std::chrono::duration<double>(Clock::now() - opened).count(); };
  for (;;) {
    const int64_t joined = store_->add(round_key(round, "joined"), 0);
    if (joined >= max_nnodes_) break;
    if (joined >= opts_.min_nnodes && waited() >= opts_.last_call_s) break;
    COLOSSAL_CHECK(waited() < opts_.rdzv_timeout_s, "[launch] elastic rendezvous: only ", joined, " node(s) joined ",
                   "round ", round, " within ", opts_.rdzv_timeout_s, " s; --nnodes ", opts_.min_nnodes, ":",
                   max_nnodes_, " needs at least ", opts_.min_nnodes);
    COLOSSAL_CHECK(g_signal.load() == 0, "[launch] interrupted during the rendezvous");
    wait_ms(100);
  }
  const int64_t size = std::min<int64_t>(store_->add(round_key(round, "joined"), 0), max_nnodes_);
  store_->set(round_key(round, "size"), to_bytes(std::to_string(size)));
  store_->set("elastic/open", to_bytes(std::to_string(round + 1)));
}

std::optional<int> Launcher::join_elastic_round() {
  for (;;) {
    const int round = static_cast<int>(store_int("elastic/open", 0));
    const int64_t index = store_->add(round_key(round, "joined"), 1) - 1;
    if (index == 0) close_elastic_round(round);  // the first to arrive decides when the round closes
    while (!store_->check({round_key(round, "size")})) {
      COLOSSAL_CHECK(g_signal.load() == 0, "[launch] interrupted during the rendezvous");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const int64_t size = store_int(round_key(round, "size"), 0);
    if (index < size) {
      opts_.nnodes = static_cast<int>(size);
      opts_.node_rank = static_cast<int>(index);
      std::fprintf(stderr, "colossal run: elastic round %d: %ld node(s) of %d:%d; this is node %d\n", round,
                   static_cast<long>(size), opts_.min_nnodes, max_nnodes_, opts_.node_rank);
      return round;
    }
    std::fprintf(stderr, "colossal run: round %d started without this node (%ld of %d:%d nodes); joining at the "
                 "group's next restart\n", round, static_cast<long>(size), opts_.min_nnodes, max_nnodes_);
    while (!store_->check({round_key(round, "ended")})) {
      COLOSSAL_CHECK(g_signal.load() == 0, "[launch] interrupted while waiting for the running group to restart");
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (to_string(store_->get(round_key(round, "ended"))) == "done") return std::nullopt;
  }
}

void Launcher::end_elastic_round(int round, bool ok) {
  try {
    // "failed" wins: any node's failure ends the round for all; "done" only when every node is.
    if (!ok) {
      store_->set(round_key(round, "ended"), to_bytes("failed"));
    } else if (hosts_store_) {  // after every node is done; the others may find the store gone by now
      store_->compareSet(round_key(round, "ended"), {}, to_bytes("done"));
    }
  } catch (...) {  // the store's host is gone: nothing left to tell
  }
}

std::vector<std::unique_ptr<Proc>> Launcher::start_attempt(int attempt) {
  std::vector<std::unique_ptr<Proc>> procs;
  for (int local = 0; local < opts_.nproc_per_node; ++local) {
    int global = opts_.node_rank * opts_.nproc_per_node + local;
    bool show = !opts_.tee || *opts_.tee == global;
    auto p = std::make_unique<Proc>(
        c10::str("rank ", global, " (node ", opts_.node_rank, ", local rank ", local, ")"),
        c10::str("[rank ", global, "] "), show);
    p->global_rank = global;
    p->start({opts_.command, rank_environment(global, local, attempt), true});
    procs.push_back(std::move(p));
  }
  return procs;
}

std::optional<dist::PublishedFailure> Launcher::published_failure(int global_rank, int attempt) {
  if (global_rank < 0) return std::nullopt;
  try {
    // The rank's monitor record (core/dist/monitor.h) of its first dist::init in this attempt.
    const std::string k = dist::store_prefix(attempt, 0) + "/" + dist::monitor_record_key(global_rank);
    if (!store_->check({k})) return std::nullopt;
    return dist::parse_failure_record(to_string(store_->get(k)));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::string> Launcher::remote_failure(int attempt) {
  if (!multi_node()) return std::nullopt;
  try {
    if (store_->check({key(attempt, "failed")})) return to_string(store_->get(key(attempt, "failed")));
  } catch (const std::exception& e) {
    return "lost the rendezvous store on node 0 (" + error_text(e) + ")";
  }
  return std::nullopt;
}

Launcher::Outcome Launcher::watch(std::vector<std::unique_ptr<Proc>>& procs, int attempt) {
  Outcome outcome;
  std::optional<Clock::time_point> kill_at;
  int signalled = 0;
  // The first local rank to exit 0 while others run, and when to say so next.
  std::string first_finished;
  Clock::time_point finished_at, next_notice;
  auto seconds_since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  auto last_remote_check = Clock::now();
  auto stop_all = [&](int sig) {
    for (auto& p : procs)
      if (p->running) signal_child(p->child, sig);
    if (!kill_at) {
      kill_at = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts_.grace_period_s * 1000));
    }
  };
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({g_wake_pipe[0], POLLIN, 0});
    for (auto& p : procs) {
      if (p->child.stdout_fd >= 0) fds.push_back({p->child.stdout_fd, POLLIN, 0});
      if (p->child.stderr_fd >= 0) fds.push_back({p->child.stderr_fd, POLLIN, 0});
    }
    ::poll(fds.data(), fds.size(), 50);
    char sink[64];
    while (::read(g_wake_pipe[0], sink, sizeof(sink)) > 0) {
    }
    for (auto& p : procs) {
      drain(p->child.stdout_fd, p->out);
      drain(p->child.stderr_fd, p->err);
    }
    // Reap.
    for (auto& p : procs) {
      if (!p->running) continue;
      int status = 0;
      pid_t r = ::waitpid(p->child.pid, &status, WNOHANG);
      if (r != p->child.pid) continue;
      p->running = false;
      p->status = status;
      if (!failed(status) && first_finished.empty()) {
        first_finished = p->label;
        finished_at = Clock::now();
        next_notice = finished_at + std::chrono::milliseconds(static_cast<int64_t>(opts_.finish_notice_s * 1000));
      }
      // Anything the rank printed just before it exited.
      drain(p->child.stdout_fd, p->out);
      drain(p->child.stderr_fd, p->err);
      if (failed(status) && outcome.ok && !signalled) {
        outcome.ok = false;
        int others = 0;
        for (auto& q : procs) others += q->running ? 1 : 0;
        outcome.summary = c10::str(p->label, " failed with ", describe_wait_status(status));
        if (auto said = recorded_error(attempt, p->global_rank)) outcome.summary += ": " + *said;
        // A rank whose output is hidden (--tee) still says why it failed: its last error lines.
        if (!p->err.enabled() && !p->err.tail().empty()) {
          std::string said;
          for (const auto& line : p->err.tail()) said += "  " + line;
          std::fprintf(stderr, "colossal run: %s failed; the end of its error output:\n%s", p->label.c_str(),
                       said.c_str());
          std::fflush(stderr);
        }
        // A rank that failed because a peer froze or vanished: name the peer, not the witness.
        if (auto published = published_failure(p->global_rank, attempt); published && !published->suspects.empty()) {
          std::string names, findings;
          for (const auto& [b, finding] : published->suspects) {
            std::string name = c10::str("rank ", b);
            for (auto& q : procs)
              if (q->global_rank == b) name = q->label;
            names += (names.empty() ? "" : ", ") + name;
            findings += (findings.empty() ? "" : "; ") + finding;
          }
          outcome.summary = c10::str(names, " stopped answering (", findings, "); seen by ", p->label,
                                     ", which failed with ", describe_wait_status(status));
        }
        if (multi_node()) {
          try {
            store_->compareSet(key(attempt, "failed"), {},
                               to_bytes(c10::str(outcome.summary, " on node ", opts_.node_rank)));
          } catch (...) {
          }
        }
        if (others > 0) stop_all(SIGTERM);
      }
    }
    // A rank finished while others still run: name them, and stop them past --finish_timeout.
    if (!first_finished.empty() && outcome.ok && !signalled) {
      std::string still;
      for (auto& p : procs)
        if (p->running && !p->remote_launcher) still += (still.empty() ? "" : ", ") + p->label;
      const bool expired = opts_.finish_timeout_s > 0 && seconds_since(finished_at) > opts_.finish_timeout_s;
      if (!still.empty() && expired) {
        outcome.ok = false;
        outcome.summary = c10::str(still, " still running ", opts_.finish_timeout_s, " s after ", first_finished,
                                   " finished (--finish_timeout)");
        stop_all(SIGTERM);
      } else if (!still.empty() && Clock::now() >= next_notice) {
        std::fprintf(stderr, "colossal run: %s finished %.0f s ago; still running: %s (a rank waiting on a collective "
                     "the finished one never joined? --finish_timeout S stops them)\n",
                     first_finished.c_str(), seconds_since(finished_at), still.c_str());
        std::fflush(stderr);
        next_notice = Clock::now() + std::chrono::seconds(60);
      }
    }
    // Signals from the user.
    int sig = g_signal.exchange(0);
    if (sig != 0) {
      signalled = signalled ? signalled : sig;
      outcome.interrupted = signalled;
      stop_all(sig);
    }
    // Failures on other nodes.
    if (outcome.ok && !signalled && multi_node() &&
        Clock::now() - last_remote_check > std::chrono::milliseconds(200)) {
      last_remote_check = Clock::now();
      if (auto why = remote_failure(attempt)) {
        outcome.ok = false;
        outcome.summary = *why;
        stop_all(SIGTERM);
      }
    }
    if (kill_at && Clock::now() > *kill_at) {
      for (auto& p : procs)
        if (p->running) signal_child(p->child, SIGKILL);
      kill_at = Clock::now() + std::chrono::hours(1);
    }
    bool any_running = false;
    for (auto& p : procs) any_running |= p->running && !p->remote_launcher;
    if (!any_running) break;
  }
  // Close pipes that grandchildren may still hold open.
  for (auto& p : procs) {
    if (p->remote_launcher && p->running) continue;  // still streaming; handled by the caller
    drain(p->child.stdout_fd, p->out);
    drain(p->child.stderr_fd, p->err);
    p->close_output();
  }
  if (signalled) outcome.ok = false;
  return outcome;
}

bool Launcher::wait_for_other_nodes(int attempt, Outcome& outcome) {
  if (!multi_node()) return true;
  store_->add(key(attempt, "done"), 1);
  for (;;) {
    try {
      if (store_->add(key(attempt, "done"), 0) >= opts_.nnodes) return true;
    } catch (const std::exception& e) {
      // Node 0 exits once every node is done; a non-zero node may see the store vanish then.
      if (opts_.node_rank != 0) return true;
      throw;
    }
    if (auto why = remote_failure(attempt)) {
      outcome.ok = false;
      outcome.summary = *why;
      return false;
    }
    if (int sig = g_signal.exchange(0)) {
      outcome.ok = false;
      outcome.interrupted = sig;
      outcome.summary = "interrupted while waiting for other nodes";
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// The other nodes' launchers exit on their own once every node is done (or has failed); stream
// their last output meanwhile, and stop them if they do not within the grace period.
void Launcher::finish_remote_launchers(std::vector<std::unique_ptr<Proc>>& remotes,
                                       Outcome& outcome) {
  auto deadline = Clock::now() + std::chrono::seconds(30);
  bool terminated = false;
  for (;;) {
    bool any = false;
    for (auto& p : remotes) {
      drain(p->child.stdout_fd, p->out);
      drain(p->child.stderr_fd, p->err);
      if (!p->running) continue;
      int status = 0;
      if (::waitpid(p->child.pid, &status, WNOHANG) == p->child.pid) {
        p->running = false;
        if (failed(status) && outcome.ok) {
          outcome.ok = false;
          outcome.summary = c10::str(p->label, " failed with ", describe_wait_status(status));
        }
      } else {
        any = true;
      }
    }
    if (!any) break;
    if (!terminated && (Clock::now() > deadline || !outcome.ok)) {
      for (auto& p : remotes)
        if (p->running) signal_child(p->child, SIGTERM);
      terminated = true;
      deadline = Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(opts_.grace_period_s * 1000));
    } else if (terminated && Clock::now() > deadline) {
      for (auto& p : remotes)
        if (p->running) signal_child(p->child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (auto& p : remotes) p->close_output();
}

int Launcher::run() {
  prepare_remote_nodes();
  opts_.validate();
  max_nnodes_ = opts_.nnodes;
  if (elastic() && opts_.master_addr.empty()) opts_.master_addr = "127.0.0.1";
  install_signal_handlers();
  base_env_ = current_environment();
  {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/colossal-run-XXXXXX";
    COLOSSAL_CHECK(::mkdtemp(pattern.data()) != nullptr, "[launch] cannot make a temporary directory like ",
                   pattern, ": ", std::strerror(errno));
    error_dir_ = pattern;
  }
  struct RemoveAtExit {
    std::string dir;
    ~RemoveAtExit() {
      try {
        fs::remove_all(dir);
      } catch (...) {
      }
    }
  } remove_error_dir{error_dir_};
  setup_store();

  // Hostfile mode: start the other nodes' launchers; they are watched like local ranks.
  std::vector<std::unique_ptr<Proc>> remotes;
  for (size_t i = 0; i < remote_hosts_.size(); ++i) {
    int node = static_cast<int>(i) + 1;
    char cwd[4096] = {0};
    COLOSSAL_CHECK(::getcwd(cwd, sizeof(cwd)) != nullptr, "[launch] getcwd() failed");
    std::string remote = "cd " + shell_quote(cwd) + " && env";
    for (const auto& [k, v] : base_env_)
      if (forwarded_to_remote_hosts(k)) remote += " " + shell_quote(k + "=" + v);
    char self[4096] = {0};
    ssize_t n = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    COLOSSAL_CHECK(n > 0, "[launch] cannot find the launcher's own path");
    remote += " " + shell_quote(self) + " run --nnodes " + std::to_string(opts_.nnodes) +
              " --node_rank " + std::to_string(node) + " --nproc_per_node " +
              std::to_string(opts_.nproc_per_node) + " --master_addr " +
              shell_quote(opts_.master_addr) + " --master_port " + std::to_string(port_) +
              " --max_restarts " + std::to_string(opts_.max_restarts);
    if (opts_.tee) remote += " --tee " + std::to_string(*opts_.tee);
    remote += " --";
    for (const auto& a : opts_.command) remote += " " + shell_quote(a);
    auto p = std::make_unique<Proc>(c10::str("node ", node, " (", remote_hosts_[i].host, ")"), "",
                                    true);
    p->remote_launcher = true;
    p->start({{opts_.ssh, remote_hosts_[i].host, remote}, base_env_, true});
    remotes.push_back(std::move(p));
  }

  Outcome outcome;
  int attempt = 0;
  if (elastic()) {
    auto round = join_elastic_round();
    if (!round) {
      std::fprintf(stderr, "colossal run: the job finished before this node could join\n");
      return 0;
    }
    attempt = *round;
  }
  for (;;) {
    if (!elastic()) join_attempt(attempt);
    auto procs = start_attempt(attempt);
    if (elastic() && failed_at_ != Clock::time_point{}) {
      std::fprintf(stderr, "colossal run: ranks started again %.1f s after the failure\n",
                   std::chrono::duration<double>(Clock::now() - failed_at_).count());
    }
    // Remote launchers are watched together with this attempt's ranks: their failure is ours.
    for (auto& r : remotes) procs.push_back(std::move(r));
    remotes.clear();
    outcome = watch(procs, attempt);
    if (outcome.ok) wait_for_other_nodes(attempt, outcome);
    // Hand the still-running remote launchers to the next attempt.
    for (auto& p : procs)
      if (p->remote_launcher && p->running) remotes.push_back(std::move(p));
    if (elastic()) end_elastic_round(attempt, outcome.ok);
    if (outcome.ok || outcome.interrupted || attempt >= opts_.max_restarts) break;
    std::fprintf(stderr, "colossal run: %s; restarting all ranks (restart %d of %d)\n",
                 outcome.summary.c_str(), attempt + 1, opts_.max_restarts);
    if (!elastic()) {
      ++attempt;
      continue;
    }
    failed_at_ = Clock::now();
    auto round = join_elastic_round();  // the nodes left (and any that came back) form the next round
    if (!round) break;
    attempt = *round;
  }
  finish_remote_launchers(remotes, outcome);

  if (outcome.ok) return 0;
  if (outcome.interrupted) {
    std::fprintf(stderr, "colossal run: interrupted by signal %d (%s); stopped %d local ranks\n",
                 outcome.interrupted, ::strsignal(outcome.interrupted), opts_.nproc_per_node);
    return 128 + outcome.interrupted;
  }
  std::fprintf(stderr, "colossal run: FAILED: %s; stopped the other ranks%s\n",
               outcome.summary.c_str(),
               opts_.max_restarts > 0
                   ? c10::str(" (after ", opts_.max_restarts, " restarts)").c_str()
                   : "");
  return 1;
}

}  // namespace

bool forwarded_to_remote_hosts(const std::string& name) {
  static const char* exact[] = {"PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "OMP_NUM_THREADS",
                                "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "HOME", "LANG"};
  static const char* prefixes[] = {"COLOSSAL_", "NCCL_", "GLOO_"};
  for (const char* e : exact)
    if (name == e) return true;
  for (const char* p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

void LaunchOptions::read(const ConfigNode& c) {
  c.read("nproc_per_node", nproc_per_node);
  if (c.has("nnodes")) {
    std::string n;
    if (c.raw("nnodes").is_string()) {
      c.read("nnodes", n);
    } else {
      int v = 1;
      c.read("nnodes", v);
      n = std::to_string(v);
    }
    set_nnodes(n);
  }
  c.read("node_rank", node_rank);
  c.read("master_addr", master_addr);
  c.read("master_port", master_port);
  c.read("hostfile", hostfile);
  c.read("ssh", ssh);
  c.read("max_restarts", max_restarts);
  c.read("grace_period_s", grace_period_s);
  c.read("rdzv_timeout_s", rdzv_timeout_s);
  c.read("finish_timeout_s", finish_timeout_s);
  if (c.has("tee")) {
    int t = 0;
    c.read("tee", t);
    tee = t;
  }
}

namespace {

int parse_count(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  COLOSSAL_CHECK(!value.empty() && end && *end == '\0', "[launch] ", flag, ": expected a whole number, got '",
                 value, "'");
  return static_cast<int>(v);
}

}  // namespace

void LaunchOptions::set_nnodes(const std::string& value) {
  auto colon = value.find(':');
  if (colon == std::string::npos) {
    nnodes = parse_count("--nnodes", value);
    min_nnodes = 0;
    return;
  }
  min_nnodes = parse_count("--nnodes (MIN of MIN:MAX)", value.substr(0, colon));
  nnodes = parse_count("--nnodes (MAX of MIN:MAX)", value.substr(colon + 1));
  if (min_nnodes == nnodes) min_nnodes = 0;
}

void LaunchOptions::set_nproc_per_node(const std::string& value) {
  const int gpus = torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0;
  if (value == "gpu") {
    COLOSSAL_CHECK(gpus > 0, "[launch] --nproc_per_node gpu: this machine has no CUDA device");
    nproc_per_node = gpus;
  } else if (value == "cpu") {
    nproc_per_node = available_cores();
  } else if (value == "auto") {
    nproc_per_node = gpus > 0 ? gpus : 1;
  } else {
    nproc_per_node = parse_count("--nproc_per_node (N, auto, cpu or gpu)", value);
  }
}

void LaunchOptions::set_rdzv_endpoint(const std::string& value) {
  COLOSSAL_CHECK(!value.empty(), "[launch] --rdzv_endpoint: expected HOST[:PORT], got nothing");
  auto colon = value.rfind(':');
  const bool bracketed_v6 = value.front() == '[';
  if (colon == std::string::npos || (bracketed_v6 && value.back() == ']')) {
    master_addr = value;
    master_port = 29400;
  } else {
    master_addr = value.substr(0, colon);
    master_port = parse_count("--rdzv_endpoint (the PORT of HOST:PORT)", value.substr(colon + 1));
  }
  if (master_addr.size() > 2 && master_addr.front() == '[' && master_addr.back() == ']')
    master_addr = master_addr.substr(1, master_addr.size() - 2);
}

void LaunchOptions::set_rdzv_backend(const std::string& value) {
  COLOSSAL_CHECK(value == "c10d" || value == "static", "[launch] --rdzv_backend: expected c10d or static, got '",
                 value, "' (the launchers meet in a c10d TCPStore on --rdzv_endpoint / --master_addr)");
}

void LaunchOptions::set_rdzv_conf(const std::string& value) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t comma = value.find(',', start);
    std::string item = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? value.size() + 1 : comma + 1;
    if (item.empty()) continue;
    auto eq = item.find('=');
    COLOSSAL_CHECK(eq != std::string::npos && eq > 0, "[launch] --rdzv_conf: expected KEY=VALUE items separated by "
                   "commas, got '", item, "'");
    const std::string key = item.substr(0, eq), v = item.substr(eq + 1);
    auto seconds = [&] {
      char* end = nullptr;
      double s = std::strtod(v.c_str(), &end);
      COLOSSAL_CHECK(!v.empty() && end && *end == '\0' && s >= 0, "[launch] --rdzv_conf ", key,
                     ": expected seconds >= 0, got '", v, "'");
      return s;
    };
    if (key == "join_timeout") rdzv_timeout_s = seconds();
    if (key == "last_call_timeout") last_call_s = seconds();
  }
}

void LaunchOptions::set_standalone() {
  nnodes = 1;
  min_nnodes = 0;
  node_rank = 0;
  master_addr = "127.0.0.1";
  master_port = 0;
}

void LaunchOptions::read_torchrun_environment() {
  auto get = [](const char* name) { return env_string(name); };
  auto named = [](const char* var, auto&& apply) {
    try {
      apply();
    } catch (const std::exception& e) {
      COLOSSAL_FAIL("[launch] from the environment variable ", var, ": ", error_text(e));
    }
  };
  if (auto v = get("PET_NPROC_PER_NODE")) named("PET_NPROC_PER_NODE", [&] { set_nproc_per_node(*v); });
  if (auto v = get("PET_NNODES")) named("PET_NNODES", [&] { set_nnodes(*v); });
  if (auto v = get("PET_NODE_RANK")) named("PET_NODE_RANK", [&] { node_rank = parse_count("PET_NODE_RANK", *v); });
  if (auto v = get("PET_RDZV_ENDPOINT")) named("PET_RDZV_ENDPOINT", [&] { set_rdzv_endpoint(*v); });
  if (auto v = get("PET_MASTER_ADDR")) master_addr = *v;
  if (auto v = get("PET_MASTER_PORT"))
    named("PET_MASTER_PORT", [&] { master_port = parse_count("PET_MASTER_PORT", *v); });
  if (auto v = get("PET_MAX_RESTARTS"))
    named("PET_MAX_RESTARTS", [&] { max_restarts = parse_count("PET_MAX_RESTARTS", *v); });
  if (auto v = get("PET_RDZV_BACKEND")) named("PET_RDZV_BACKEND", [&] { set_rdzv_backend(*v); });
  if (auto v = get("PET_RDZV_ID")) rdzv_id = *v;
  if (auto v = get("PET_STANDALONE"); v && *v != "0" && *v != "false" && *v != "False") set_standalone();
}

void LaunchOptions::validate() const {
  COLOSSAL_CHECK(nproc_per_node >= 1, "[launch] --nproc_per_node: expected >= 1, got ",
                 nproc_per_node);
  COLOSSAL_CHECK(nnodes >= 1, "[launch] --nnodes: expected >= 1, got ", nnodes);
  COLOSSAL_CHECK(min_nnodes >= 0 && min_nnodes <= nnodes, "[launch] --nnodes MIN:MAX: expected 1 <= MIN <= MAX, got ",
                 min_nnodes, ":", nnodes);
  COLOSSAL_CHECK(node_rank >= 0 && node_rank < nnodes,
                 "[launch] --node_rank: expected 0 <= node_rank < nnodes (", nnodes, "), got ",
                 node_rank);
  COLOSSAL_CHECK(master_port >= -1 && master_port < 65536,
                 "[launch] --master_port: expected 0..65535, got ", master_port);
  COLOSSAL_CHECK(!(nnodes > 1 && master_port == 0 && hostfile.empty()),
                 "[launch] --master_port 0 needs a single node or --hostfile: the other nodes "
                 "must know the port");
  COLOSSAL_CHECK(min_nnodes == 0 || hostfile.empty(), "[launch] --nnodes ", min_nnodes, ":", nnodes,
                 " (elastic) and --hostfile: start a launcher on each host instead (the rendezvous numbers them)");
  COLOSSAL_CHECK(min_nnodes == 0 || master_port != 0, "[launch] --nnodes ", min_nnodes, ":", nnodes,
                 " (elastic) needs a known --rdzv_endpoint/--master_port, not 0: the other nodes must find it");
  COLOSSAL_CHECK(hostfile.empty() || node_rank == 0,
                 "[launch] --hostfile is used on the first host only (node_rank 0)");
  COLOSSAL_CHECK(max_restarts >= 0, "[launch] --max_restarts: expected >= 0, got ", max_restarts);
  COLOSSAL_CHECK(grace_period_s >= 0, "[launch] grace period must be >= 0");
  COLOSSAL_CHECK(finish_timeout_s >= 0, "[launch] --finish_timeout: expected >= 0 (0: wait), got ", finish_timeout_s);
  COLOSSAL_CHECK(!tee || (*tee >= 0 && *tee < nnodes * nproc_per_node), "[launch] --tee ",
                 tee.value_or(-1), ": expected a rank in [0, ", nnodes * nproc_per_node, ")");
  COLOSSAL_CHECK(!command.empty(),
                 "[launch] no program given (expected: colossal run [options] -- PROGRAM ARGS...)");
}

int run(const LaunchOptions& options) {
  Launcher l(options);
  return l.run();
}

}  // namespace colossal::launch
