#pragma once
// A cooperative stop request for long-running jobs, asked by whoever owns the signals.
//
// A training binary (apps/common/app_entry.h: run_training_main) turns SIGINT and SIGTERM into a
// request; a job run from Python (colossal.llama.train) asks the interpreter for pending signals,
// since Python's SIGINT handler only sets a flag its interpreter reads between bytecodes, which
// never happens while C++ runs the training loop. The host installs a check here; the training
// loop asks interrupt_requested() at each step's end, finishes the step on every rank, writes a
// checkpoint and throws Interrupted, which the host turns back into its own kind of interruption
// (an exit status of 128 + the signal, or KeyboardInterrupt).
#include <functional>
#include <stdexcept>
#include <string>

namespace colossal {

/// What a job throws when it stops on request; `what()` says where it stopped.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Installs the check (an empty function removes it). The check runs on the calling thread of
/// interrupt_requested and returns true when the host wants the job to stop.
void set_interrupt_check(std::function<bool()> check);

/// Whether the installed check says the job should stop (false without a check).
bool interrupt_requested();

/// Removes the check when it leaves scope (a job installs one for its own duration).
class InterruptCheckScope {
 public:
  explicit InterruptCheckScope(std::function<bool()> check) { set_interrupt_check(std::move(check)); }
  ~InterruptCheckScope() { set_interrupt_check({}); }
  InterruptCheckScope(const InterruptCheckScope&) = delete;
  InterruptCheckScope& operator=(const InterruptCheckScope&) = delete;
};

}  // namespace colossal
