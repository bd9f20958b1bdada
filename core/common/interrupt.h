#pragma once
// A cooperative stop request for long-running jobs called from a host that owns the signals.
//
// A C++ binary is stopped by SIGINT's default action. A job run from Python (colossal.llama.train)
// is not: Python's SIGINT handler only sets a flag that its interpreter reads between bytecodes,
// which never happens while C++ runs the training loop. The host installs a check here (the
// Python module's asks the interpreter for pending signals) and the loops call
// throw_if_interrupted() at their step boundaries; the Interrupted exception unwinds the job
// (files already written stay whole: checkpoints are atomic) and the host turns it back into its
// own kind of interruption (KeyboardInterrupt).
#include <functional>
#include <stdexcept>
#include <string>

namespace colossal {

/// What throw_if_interrupted throws; `what()` names the place that noticed.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Installs the check (an empty function removes it). The check runs on the calling thread of
/// throw_if_interrupted and returns true when the host wants the job to stop.
void set_interrupt_check(std::function<bool()> check);

/// Whether the installed check says the job should stop (false without a check). The training
/// loop asks at each step's end, agrees with the other ranks, writes a checkpoint and then throws
/// Interrupted itself.
bool interrupt_requested();

/// Throws Interrupted when the installed check says so; does nothing without a check.
/// `where` goes into the message ("training step 12").
void throw_if_interrupted(const std::string& where);

/// Removes the check when it leaves scope (a job installs one for its own duration).
class InterruptCheckScope {
 public:
  explicit InterruptCheckScope(std::function<bool()> check) { set_interrupt_check(std::move(check)); }
  ~InterruptCheckScope() { set_interrupt_check({}); }
  InterruptCheckScope(const InterruptCheckScope&) = delete;
  InterruptCheckScope& operator=(const InterruptCheckScope&) = delete;
};

}  // namespace colossal
