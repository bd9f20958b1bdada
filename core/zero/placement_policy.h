#pragma once
// Gemini's placement policy: where each chunk lives and when a gathered chunk gives its memory
// back. It decides; the chunk manager (chunk_manager.h) moves the bytes.
//
//   static  shard_param_frac of the large chunks (by order) are released after use, the rest stay
//           gathered; offload_optim_frac of all chunks keep master and moments on the offload
//           tier, offload_param_frac their parameter shard too.
//   auto    gathered chunks are a cache within gathered_budget_bytes: a gather that would exceed
//           it evicts the chunk whose next recorded use is furthest away (Belady), unknown uses
//           least-recently-used first.
//
// Both follow the access order recorded in the first step (one entry per module call and chunk,
// forward and backward) to prefetch the next chunks and to keep a chunk that is needed again
// right away.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace colossal::zero {

/// Where a chunk's pieces live, fixed when the chunks are built.
struct ChunkTier {
  bool keep_gathered = false;  // never released
  bool offload_optim = false;  // master and moments on the offload tier
  bool offload_param = false;  // the parameter shard too
};

class PlacementPolicy {
 public:
  struct Options {
    std::string placement = "static";  // static | auto
    double shard_param_frac = 1.0;
    double offload_optim_frac = 0.0;
    double offload_param_frac = 0.0;
    int64_t gathered_budget_bytes = 1LL << 30;
    int prefetch = 2;
  };
  explicit PlacementPolicy(Options options);

  bool automatic() const { return options_.placement == "auto"; }
  /// Static placements release a chunk as soon as its modules are done; auto keeps it cached.
  bool releases_after_use() const { return !automatic(); }

  /// The tier of chunk `ci` of `n`, of which the first `large` hold the large parameters.
  ChunkTier tier(int64_t ci, int64_t n, int64_t large) const;

  // ---- the recorded access order ----
  bool recording() const { return recording_; }
  /// Ends the recording (after the first step) and rewinds the cursor (after every step).
  void end_step();
  void note_access(size_t chunk);
  /// The recorded order says `chunk` is the very next access.
  bool next_access_is(size_t chunk) const;
  /// Accesses until `chunk` is used again (INT64_MAX: unknown).
  int64_t next_use_distance(size_t chunk) const;
  /// The next `prefetch` distinct chunks of the recorded order (gathered or not), for
  /// prefetching; empty while recording.
  std::vector<size_t> upcoming() const;
  int prefetch_depth() const { return options_.prefetch; }

  // ---- the auto placement's budget ----
  bool fits(int64_t gathered_bytes, int64_t more) const {
    return !automatic() || gathered_bytes + more <= options_.gathered_budget_bytes;
  }
  /// The chunk to evict among `candidates` (releasable, gathered): furthest next use, unknown
  /// ones least-recently-used first (`last_use` gives a chunk's last use clock). None if empty.
  std::optional<size_t> victim(const std::vector<size_t>& candidates,
                               const std::function<int64_t(size_t)>& last_use) const;

 private:
  Options options_;
  std::vector<size_t> order_;  // chunk accesses of the first step
  size_t cursor_ = 0;          // one past the entry matched last
  bool recording_ = true;
};

}  // namespace colossal::zero
