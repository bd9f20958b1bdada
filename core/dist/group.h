#pragma once
// A process group: an ordered set of global ranks with a c10d backend, a name for messages,
// and a timeout. Cheap to copy (shared state). A default-constructed Group means "this process
// is not a member" (what new_group returns on ranks outside the group).
#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace colossal::dist {

namespace detail {
class ShmTransport;
struct GroupState {
  std::string name;         // "world", "mesh(dp)[0]" ...
  std::string store_key;    // unique key prefix in the rendezvous store
  std::vector<int> ranks;   // global ranks, in group-rank order
  int rank = -1;            // this process's rank in the group
  std::chrono::milliseconds timeout{60000};
  c10::intrusive_ptr<c10d::Backend> backend;
  // Shared-memory collectives when every member runs on this host (null otherwise).
  std::unique_ptr<ShmTransport> shm;
  std::atomic<uint64_t> next_seq{0};      // collectives issued on this group so far
  std::atomic<uint64_t> next_p2p_seq{0};  // sends and receives (numbered apart)
  std::atomic<bool> broken{false};    // a collective failed; the backend may have stuck threads
  ~GroupState();
};
}  // namespace detail

class Group {
 public:
  Group() = default;
  explicit Group(std::shared_ptr<detail::GroupState> state) : state_(std::move(state)) {}

  /// False on processes outside the group.
  bool is_member() const { return state_ != nullptr; }
  const std::string& name() const;
  /// This process's rank within the group.
  int rank() const;
  int size() const;
  /// Global ranks of the members, indexed by group rank.
  const std::vector<int>& ranks() const;
  int global_rank(int group_rank) const;
  /// Group rank of a global rank, or -1 when it is not a member.
  int group_rank_of(int global_rank) const;
  std::chrono::milliseconds timeout() const;
  /// The underlying c10d backend, for calls this API does not wrap.
  const c10::intrusive_ptr<c10d::Backend>& backend() const;
  /// "group 'tp' (2 ranks: 0,1)"
  std::string describe() const;

  detail::GroupState& state() const;

  /// --fp8_communication: the parallel layers' activation exchanges over this handle (their
  /// all-gathers, all-to-alls and pipeline sends) carry FP8 payloads with scales
  /// (parallel/fp8_payload.h). A property of the handle, not of the group: the other handles to
  /// the same ranks (gradient sync, norms, checkpoint gathers) stay exact.
  bool fp8_payloads() const { return fp8_payloads_; }
  Group with_fp8_payloads(bool on = true) const {
    Group g(*this);
    g.fp8_payloads_ = on;
    return g;
  }

 private:
  std::shared_ptr<detail::GroupState> state_;
  bool fp8_payloads_ = false;
};

/// "0-3" for contiguous runs, "0,2,4" otherwise (long lists are shortened).
std::string format_ranks(const std::vector<int>& ranks);

}  // namespace colossal::dist
