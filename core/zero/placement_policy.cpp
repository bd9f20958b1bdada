#include "core/zero/placement_policy.h"

#include <algorithm>
#include <climits>
#include <cmath>

namespace colossal::zero {

PlacementPolicy::PlacementPolicy(Options options) : options_(std::move(options)) {}

ChunkTier PlacementPolicy::tier(int64_t ci, int64_t n, int64_t large) const {
  auto count = [](double frac, int64_t of) { return static_cast<int64_t>(std::ceil(frac * of - 1e-9)); };
  ChunkTier t;
  // Chunks beyond shard_param_frac of the large ones, and every small one, stay gathered.
  t.keep_gathered = ci >= count(options_.shard_param_frac, large);
  t.offload_optim = ci < count(options_.offload_optim_frac, n);
  t.offload_param = ci < count(options_.offload_param_frac, n);
  return t;
}

void PlacementPolicy::end_step() {
  recording_ = false;
  cursor_ = 0;
}

// order_ holds one entry per (module call, chunk); cursor_ resynchronises by search when a
// step deviates from the recorded one.
void PlacementPolicy::note_access(size_t chunk) {
  if (recording_) {
    order_.push_back(chunk);
    return;
  }
  for (size_t k = cursor_; k < order_.size(); ++k)
    if (order_[k] == chunk) {
      cursor_ = k + 1;
      return;
    }
  for (size_t k = 0; k < cursor_ && k < order_.size(); ++k)
    if (order_[k] == chunk) {
      cursor_ = k + 1;
      return;
    }
}

bool PlacementPolicy::next_access_is(size_t chunk) const {
  return !recording_ && cursor_ < order_.size() && order_[cursor_] == chunk;
}

int64_t PlacementPolicy::next_use_distance(size_t chunk) const {
  if (recording_) return LLONG_MAX;
  for (size_t k = cursor_; k < order_.size(); ++k)
    if (order_[k] == chunk) return static_cast<int64_t>(k - cursor_ + 1);
  return LLONG_MAX;
}

std::vector<size_t> PlacementPolicy::upcoming() const {
  std::vector<size_t> seen;
  if (recording_ || options_.prefetch <= 0) return seen;
  for (size_t k = cursor_; k < order_.size(); ++k) {
    if (std::find(seen.begin(), seen.end(), order_[k]) != seen.end()) continue;
    seen.push_back(order_[k]);
    if (static_cast<int>(seen.size()) == options_.prefetch) break;
  }
  return seen;
}

std::optional<size_t> PlacementPolicy::victim(const std::vector<size_t>& candidates,
                                              const std::function<int64_t(size_t)>& last_use) const {
  std::optional<size_t> best;
  int64_t best_score = -1;
  for (size_t ci : candidates) {
    int64_t score = next_use_distance(ci);
    if (score == LLONG_MAX) score = LLONG_MAX - last_use(ci);  // unknown: least recently used
    if (score > best_score) {
      best_score = score;
      best = ci;
    }
  }
  return best;
}

}  // namespace colossal::zero
