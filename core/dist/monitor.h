#pragma once
// Liveness and progress of every rank, so a failed or stuck collective can name who is missing.
//
// Each rank runs one background thread that, every `interval`:
//   * publishes its record under colossal/monitor/<rank> in the rendezvous store: a heartbeat
//     counter, its state (alive / exited / failed + why), and for each group the sequence number
//     and name of the last collective it entered;
//   * reads every other rank's record and remembers when each heartbeat last advanced.
// A rank whose heartbeat has not advanced for `dead_after` is gone (killed, crashed, frozen).
// It uses its own store connection, so it never contends with rendezvous traffic.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/dist/group.h"

namespace colossal::dist {

/// Where a job's keys live in the rendezvous store: every key of dist::init number `generation`
/// (0 for a program's first) in restart `attempt` is under this prefix (PrefixStore adds "/").
std::string store_prefix(int attempt, int generation);
/// The key of `rank`'s monitor record, under the prefix.
std::string monitor_record_key(int rank);

/// What a failed rank published: why it failed, and the peers its diagnosis found missing
/// (never joined, gone silent, or not at the collective), each with its finding. What a
/// launcher reads to name the rank a failure points at.
struct PublishedFailure {
  std::string why;
  std::vector<std::pair<int, std::string>> suspects;
};
/// Reads a monitor record's text; nothing when it states no failure.
std::optional<PublishedFailure> parse_failure_record(const std::string& record);

class Monitor {
 public:
  struct Options {
    std::chrono::milliseconds interval{1000};    // heartbeat period
    std::chrono::milliseconds dead_after{10000}; // no heartbeat for this long = gone
  };

  Monitor(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size, Options options);
  /// Publishes "exited" (unless already "failed") and stops the thread.
  ~Monitor();

  /// Records that this rank entered collective `seq` (`op`) on `group`.
  void on_enter(const detail::GroupState& group, const char* op, uint64_t seq);
  /// Publishes "failed: why" at once, so peers stop waiting for us.
  void mark_failed(const std::string& why);

  /// Publishes "exited" now (a clean shutdown), so peers do not wait for this rank.
  void mark_exited();
  /// Blocks until every other rank has exited, failed or gone silent, or `max_wait` passed.
  /// The rank hosting the store calls it before closing, so the others can still finish.
  void wait_for_peers_to_leave(std::chrono::milliseconds max_wait);

  /// A member of `group` that is known gone, exited or failed, described for a message; nullopt
  /// when every member looks alive. Cheap: reads the thread's latest view.
  std::optional<std::string> find_lost_member(const detail::GroupState& group);

  /// Explains a failed collective: which members are gone or have not reached collective `seq`
  /// (liveness only when `seq` is nullopt, as for point-to-point calls). May take up to ~3
  /// heartbeat intervals to tell a dead rank from a live one.
  std::string diagnose(const detail::GroupState& group, std::optional<uint64_t> seq);

  const Options& options() const { return options_; }

 private:
  struct PeerRecord {
    bool present = false;
    int64_t heartbeat = -1;
    std::string state = "alive";  // alive | exited | failed
    std::string why;
    std::map<std::string, std::pair<uint64_t, std::string>> groups;  // key -> (seq, op)
    // When the poll that saw the heartbeat advance began (proof of life in diagnose() must not
    // count a beat published before a failure) and when it finished (silence is measured from
    // there, so a slow store or a starved observer is not taken for a silent peer).
    std::chrono::steady_clock::time_point last_advance{};
    std::chrono::steady_clock::time_point advance_seen{};
    int polls_since_advance = 0;
  };

  void run();
  void publish_locked();
  void poll_peers_locked();
  std::optional<std::string> lost_reason_locked(int rank,
                                                std::chrono::steady_clock::time_point now) const;

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  int world_size_;
  Options options_;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  int64_t heartbeat_ = 0;
  std::string state_ = "alive";
  std::string why_;
  std::vector<std::pair<int, std::string>> suspects_;  // from the last diagnose(), published on failure
  std::map<std::string, std::pair<uint64_t, std::string>> my_groups_;
  std::vector<PeerRecord> peers_;
  std::chrono::steady_clock::time_point last_poll_done_{};
  bool store_lost_ = false;
  std::string store_error_;
  std::thread thread_;
};

/// How a wait_for_group() ended: `ready`, or not — then `lost` holds the monitor's finding, or
/// nothing when the group's timeout passed.
struct GroupWait {
  bool ready = false;
  std::optional<std::string> lost;
};

/// Polls `ready` with a growing pause (50 us to 5 ms) until it returns true, the group's timeout
/// passes, or `monitor` (asked once per heartbeat interval; may be null) finds a member gone. For
/// waits on the store, where no collective can say a peer died.
GroupWait wait_for_group(Monitor* monitor, const detail::GroupState& group, const std::function<bool()>& ready);

}  // namespace colossal::dist
