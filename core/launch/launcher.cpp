#include "core/launch/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/common/check.h"
#include "core/dist/monitor.h"
#include "core/dist/net.h"
#include "core/launch/child_process.h"
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
  int world_size() const { return opts_.nnodes * opts_.nproc_per_node; }
  bool multi_node() const { return opts_.nnodes > 1; }

  LaunchOptions opts_;
  int port_ = 0;
  c10::intrusive_ptr<c10d::TCPStore> store_;
  std::vector<HostEntry> remote_hosts_;  // hostfile mode: nodes 1..N-1
  std::map<std::string, std::string> base_env_;
};

void Launcher::setup_store() {
  c10d::TCPStoreOptions so;
  so.isServer = opts_.node_rank == 0;
  so.waitWorkers = false;
  so.timeout = std::chrono::milliseconds(static_cast<int64_t>(opts_.rdzv_timeout_s * 1000));
  int port = opts_.master_port;
  if (port < 0) port = multi_node() ? 29500 : 0;
  so.port = static_cast<uint16_t>(port);
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(opts_.master_addr, so);
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[launch] ", so.isServer ? "cannot host" : "cannot reach",
                  " the rendezvous store at ", opts_.master_addr, ":", port, ": ", error_text(e),
                  so.isServer ? " (is the port in use? pass --master_port 0 for a free one)" : "");
  }
  port_ = store_->getPort();
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
  install_signal_handlers();
  base_env_ = current_environment();
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
  for (int attempt = 0;; ++attempt) {
    join_attempt(attempt);
    auto procs = start_attempt(attempt);
    // Remote launchers are watched together with this attempt's ranks: their failure is ours.
    for (auto& r : remotes) procs.push_back(std::move(r));
    remotes.clear();
    outcome = watch(procs, attempt);
    if (outcome.ok) wait_for_other_nodes(attempt, outcome);
    // Hand the still-running remote launchers to the next attempt.
    for (auto& p : procs)
      if (p->remote_launcher && p->running) remotes.push_back(std::move(p));
    if (outcome.ok || outcome.interrupted || attempt >= opts_.max_restarts) break;
    std::fprintf(stderr, "colossal run: %s; restarting all ranks (restart %d of %d)\n",
                 outcome.summary.c_str(), attempt + 1, opts_.max_restarts);
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
  c.read("nnodes", nnodes);
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

void LaunchOptions::validate() const {
  COLOSSAL_CHECK(nproc_per_node >= 1, "[launch] --nproc_per_node: expected >= 1, got ",
                 nproc_per_node);
  COLOSSAL_CHECK(nnodes >= 1, "[launch] --nnodes: expected >= 1, got ", nnodes);
  COLOSSAL_CHECK(node_rank >= 0 && node_rank < nnodes,
                 "[launch] --node_rank: expected 0 <= node_rank < nnodes (", nnodes, "), got ",
                 node_rank);
  COLOSSAL_CHECK(master_port >= -1 && master_port < 65536,
                 "[launch] --master_port: expected 0..65535, got ", master_port);
  COLOSSAL_CHECK(!(nnodes > 1 && master_port == 0 && hostfile.empty()),
                 "[launch] --master_port 0 needs a single node or --hostfile: the other nodes "
                 "must know the port");
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
