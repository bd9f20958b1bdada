#pragma once
// Starting and stopping the launcher's child processes.
#include <sys/types.h>

#include <map>
#include <deque>
#include <string>
#include <vector>

namespace colossal::launch {

struct SpawnSpec {
  std::vector<std::string> argv;              // argv[0] is looked up on PATH when it has no '/'
  std::map<std::string, std::string> env;     // the complete environment of the child
  bool capture_output = true;                 // pipes for stdout/stderr, else inherit
};

struct Child {
  pid_t pid = -1;
  int stdout_fd = -1;  // read ends (or -1)
  int stderr_fd = -1;
};

/// fork + exec. The child gets its own process group (so signals reach its descendants too) and
/// is killed if the launcher dies (PR_SET_PDEATHSIG). Throws when the program cannot be found.
Child spawn_child(const SpawnSpec& spec);

/// Sends `sig` to the child's whole process group.
void signal_child(const Child& child, int sig);

/// The current process environment as a map.
std::map<std::string, std::string> current_environment();

/// Resolves a program name through PATH; throws naming it when not found or not executable.
std::string resolve_program(const std::string& name);

/// "exit code 3", "signal 9 (Killed)"
std::string describe_wait_status(int status);

/// Splits a byte stream into lines and writes each with a prefix (an incomplete last line is
/// kept until more arrives or flush()).
class LinePrefixer {
 public:
  LinePrefixer(std::string prefix, int out_fd, bool enabled)
      : prefix_(std::move(prefix)), out_fd_(out_fd), enabled_(enabled) {}
  void feed(const char* data, size_t n);
  void flush();
  bool enabled() const { return enabled_; }
  /// The last few lines seen (shown or not): what a hidden rank said before it failed.
  const std::deque<std::string>& tail() const { return tail_; }

 private:
  void write_line(const std::string& line);
  std::string prefix_;
  int out_fd_;
  bool enabled_;
  std::string pending_;
  std::deque<std::string> tail_;
};

}  // namespace colossal::launch
