#include "core/dist/group.h"

#include <algorithm>

#include "core/common/check.h"
#include "core/dist/shm_transport.h"

namespace colossal::dist {

detail::GroupState::~GroupState() {
  // A failed collective can leave Gloo worker threads blocked on a dead peer; destroying the
  // backend would join them and hang the exiting process. Leak it instead: the process is
  // about to report the failure and exit, and the OS reclaims everything.
  if (broken.load() && backend) (void)backend.release();
  if (shm) shm->abort();  // its worker may be waiting for a dead member
}

namespace {
const detail::GroupState& checked(const std::shared_ptr<detail::GroupState>& s) {
  COLOSSAL_CHECK(s != nullptr, "[dist] this process is not a member of the group");
  return *s;
}
}  // namespace

const std::string& Group::name() const { return checked(state_).name; }
int Group::rank() const { return checked(state_).rank; }
int Group::size() const { return static_cast<int>(checked(state_).ranks.size()); }
const std::vector<int>& Group::ranks() const { return checked(state_).ranks; }
std::chrono::milliseconds Group::timeout() const { return checked(state_).timeout; }
const c10::intrusive_ptr<c10d::Backend>& Group::backend() const { return checked(state_).backend; }
detail::GroupState& Group::state() const {
  checked(state_);
  return *state_;
}

int Group::global_rank(int group_rank) const {
  const auto& r = ranks();
  COLOSSAL_CHECK(group_rank >= 0 && group_rank < static_cast<int>(r.size()), "[dist] ",
                 describe(), ": expected a group rank in [0, ", r.size(), "), got ", group_rank);
  return r[group_rank];
}

int Group::group_rank_of(int global) const {
  const auto& r = ranks();
  auto it = std::find(r.begin(), r.end(), global);
  return it == r.end() ? -1 : static_cast<int>(it - r.begin());
}

std::string Group::describe() const {
  if (!state_) return "group (not a member)";
  return c10::str("group '", state_->name, "' (", state_->ranks.size(), " ranks: ",
                  format_ranks(state_->ranks), ")");
}

std::string format_ranks(const std::vector<int>& ranks) {
  if (ranks.empty()) return "none";
  bool contiguous = true;
  for (size_t i = 1; i < ranks.size(); ++i) contiguous &= ranks[i] == ranks[i - 1] + 1;
  if (contiguous && ranks.size() > 2) return c10::str(ranks.front(), "-", ranks.back());
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i == 16) return out + ",... (" + std::to_string(ranks.size()) + " in all)";
    out += (i ? "," : "") + std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace colossal::dist
