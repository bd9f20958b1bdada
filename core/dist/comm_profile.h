#pragma once
// The communication profiler: for each group and collective, how many calls, how many bytes and
// how long per training step, and how much of that time was hidden behind compute.
//
// Off unless COLOSSAL_COMM_PROFILE is set (read once, at dist::init): then every collective
// records itself here, a step ends at each optimizer step (the Booster calls end_step()), and the
// table below is logged when dist shuts down. Set to a directory, each rank also appends one
// JSON line per step to <dir>/comm_rank<R>.jsonl. When off, a collective pays one relaxed
// load and a branch.
//
//   group          op              calls/step   MiB/step   ms/step   hidden
//   mesh(dp)[0]    all_reduce            4.00      12.50     31.20      71%
//
// Bytes are what this rank hands to the collective: the tensor for all_reduce and broadcast,
// the input for reduce_scatter and all_to_all, the output for all_gather, the message for send
// and recv. The time of a call runs from its launch to its completion (the transport's own
// completion callback where there is one, else the end of the wait); the exposed part is the time
// the caller spent blocked in wait() (all of a synchronous call's time), and hidden = 1 - exposed
// / time.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace colossal::dist::comm_profile {

struct Totals {
  int64_t calls = 0;
  int64_t bytes = 0;
  double seconds = 0;          // launch to completion, summed over calls
  double exposed_seconds = 0;  // blocked in wait(), summed over calls
  double hidden_fraction() const { return seconds > 0 ? 1.0 - std::min(1.0, exposed_seconds / seconds) : 0.0; }
};

/// (group name, op) -> totals.
using Table = std::map<std::pair<std::string, std::string>, Totals>;

struct Step {
  int64_t step = 0;  // 1-based, counted by end_step()
  Table table;
};

namespace detail {
extern std::atomic<bool> g_enabled;  // read (relaxed) on every collective
}  // namespace detail

inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }

/// Reads COLOSSAL_COMM_PROFILE (unset, "0": off; "1": table only; anything else: a directory
/// for the per-rank JSON lines). dist::init calls it with the process's rank.
void configure_from_environment(int rank);
/// Turns recording on or off directly (tests; a tool profiling a window of steps).
void set_enabled(bool on);

/// One finished call. `exposed_seconds` is the part the caller was blocked waiting.
void record(const std::string& group, const char* op, int64_t bytes, double seconds, double exposed_seconds);

/// Closes the current step: its table joins the history (and the JSON file, when configured).
/// Calls made before the first end_step() belong to step 1.
void end_step();
/// The finished steps so far, oldest first (a bounded history: the last 10000 steps).
std::vector<Step> steps();
/// The calls recorded since the last end_step().
Table current();
/// Every finished step summed, and how many there were.
std::pair<Table, int64_t> totals();
/// The table above, per step averages over the finished steps (the open step when none finished).
std::string format_summary();
/// Logs format_summary() (once, when anything was recorded) and forgets everything.
void finish();
/// Forgets everything recorded (tests).
void reset();

}  // namespace colossal::dist::comm_profile
