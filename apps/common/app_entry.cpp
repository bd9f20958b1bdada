#include "apps/common/app_entry.h"

#include <signal.h>

#include <atomic>
#include <cstdio>
#include <exception>

#include "core/common/check.h"
#include "core/common/interrupt.h"
#include "core/launch/error_file.h"

namespace colossal::apps {
namespace {

std::atomic<int> g_stop_signal{0};

void on_stop_signal(int sig) { g_stop_signal.store(sig); }

// SIGINT and SIGTERM (what `colossal run`, SLURM and Kubernetes send) ask the job to stop: the
// training loop finishes its step, writes a checkpoint and says where. The handler is armed once
// (SA_RESETHAND): a second Ctrl-C takes the default action and ends the process at once.
void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace

std::vector<std::string> arguments_of(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return args;
}

int run_main(const char* program, int argc, char** argv, RunSummary (*job)(const std::vector<std::string>&)) {
  try {
    return job(arguments_of(argc, argv)).exit_code;
  } catch (const Interrupted& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    const int sig = g_stop_signal.load();
    return 128 + (sig ? sig : SIGINT);  // the shell's convention for a job a signal ended
  } catch (const std::exception& e) {
    const std::string text = error_text(e);
    std::fprintf(stderr, "%s: %s\n", program, text.c_str());
    launch::record_fatal_error(program, text);  // torchrun's and `colossal run`'s error file
    return 1;
  }
}

int run_training_main(const char* program, int argc, char** argv,
                      RunSummary (*job)(const std::vector<std::string>&)) {
  install_stop_signals();
  InterruptCheckScope stop_check([] { return g_stop_signal.load() != 0; });
  return run_main(program, argc, argv, job);
}

}  // namespace colossal::apps
