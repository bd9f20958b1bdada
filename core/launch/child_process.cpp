#include "core/launch/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/check.h"

extern char** environ;

namespace colossal::launch {

std::map<std::string, std::string> current_environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

std::string resolve_program(const std::string& name) {
  COLOSSAL_CHECK(!name.empty(), "[launch] no program given (expected: colossal run [options] -- "
                                "PROGRAM ARGS...)");
  auto executable = [](const std::string& p) {
    struct stat st{};
    return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    COLOSSAL_CHECK(executable(name), "[launch] program '", name, "' does not exist or is not executable");
    return name;
  }
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (executable(candidate)) return candidate;
    start = end + 1;
  }
  COLOSSAL_FAIL("[launch] program '", name, "' not found on PATH");
}

Child spawn_child(const SpawnSpec& spec) {
  COLOSSAL_CHECK(!spec.argv.empty(), "[launch] empty command");
  std::string program = resolve_program(spec.argv[0]);
  // Everything the child needs is built before fork(): after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1};
  if (spec.capture_output) {
    COLOSSAL_CHECK(::pipe2(out_pipe, O_CLOEXEC) == 0 && ::pipe2(err_pipe, O_CLOEXEC) == 0,
                   "[launch] pipe() failed: ", std::strerror(errno));
  }
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  COLOSSAL_CHECK(pid >= 0, "[launch] fork() failed: ", std::strerror(errno));
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
    // Default signal dispositions and an empty mask, whatever the launcher set for itself.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGPIPE, SIG_DFL);
    if (spec.capture_output) {
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
    }
    ::execve(program.c_str(), argv.data(), envp.data());
    const char msg[] = "colossal run: exec failed\n";
    (void)!::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  Child c;
  c.pid = pid;
  if (spec.capture_output) {
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    c.stdout_fd = out_pipe[0];
    c.stderr_fd = err_pipe[0];
  }
  return c;
}

void signal_child(const Child& child, int sig) {
  if (child.pid <= 0) return;
  if (::kill(-child.pid, sig) != 0) ::kill(child.pid, sig);
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exit code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    const char* name = ::strsignal(sig);
    return "signal " + std::to_string(sig) + " (" + (name ? name : "?") + ")";
  }
  return "status " + std::to_string(status);
}

void LinePrefixer::feed(const char* data, size_t n) {
  pending_.append(data, n);
  size_t start = 0;
  for (;;) {
    size_t nl = pending_.find('\n', start);
    if (nl == std::string::npos) break;
    write_line(pending_.substr(start, nl - start + 1));
    start = nl + 1;
  }
  pending_.erase(0, start);
}

void LinePrefixer::flush() {
  if (!pending_.empty()) write_line(pending_ + "\n");
  pending_.clear();
}

void LinePrefixer::write_line(const std::string& line) {
  tail_.push_back(line);
  if (tail_.size() > 5) tail_.pop_front();
  if (!enabled_) return;
  std::string out = prefix_ + line;
  const char* p = out.data();
  size_t left = out.size();
  while (left > 0) {
    ssize_t w = ::write(out_fd_, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;  // the reader went away; dropping output beats blocking the launcher
    p += w;
    left -= static_cast<size_t>(w);
  }
}

}  // namespace colossal::launch
