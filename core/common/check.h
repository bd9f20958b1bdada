#pragma once
// The project's one error macro. It throws c10::Error (through TORCH_CHECK) with the calling
// process's rank in front of the message, so a failure on rank 5 of 64 says so:
//
//   COLOSSAL_CHECK(world % tp == 0, "[mesh] world size ", world, " is not divisible by tp ", tp);
//   -> "[rank 5] [mesh] world size 6 is not divisible by tp 4"
//
// Use it for user input and configuration errors (messages say "expected X, got Y"). Use
// TORCH_INTERNAL_ASSERT for our own invariants. Message arguments are evaluated only on failure.
#include <c10/util/Exception.h>

#include "core/common/process_info.h"

#define COLOSSAL_CHECK(cond, ...) \
  TORCH_CHECK((cond), "[rank ", ::colossal::process_rank_string(), "] ", __VA_ARGS__)

// For conditions already known to be false (the end of a parse, an unsupported branch).
#define COLOSSAL_FAIL(...) COLOSSAL_CHECK(false, __VA_ARGS__)

#include <exception>
#include <string>

namespace colossal {
/// An exception's message for people: c10::Error without its C++ backtrace.
inline std::string error_text(const std::exception& e) {
  if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) return c10e->what_without_backtrace();
  return e.what();
}
/// The first line of a message (a peer's error text, a backtrace's head).
inline std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace colossal
