#pragma once
// Which sample indices each data-parallel rank reads, epoch by epoch: the dataset's indices are
// shuffled with (seed, epoch) — identically on every rank — then padded (or cut, drop_last) to a
// multiple of the number of ranks, and rank r takes every n-th index starting at r. The position
// inside the epoch is part of the state so a resumed run continues where it stopped.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace colossal::data {

class DistributedSampler {
 public:
  struct Options {
    int64_t dataset_size = 0;
    bool shuffle = true;
    uint64_t seed = 0;
    bool drop_last = false;  // false: pad by repeating the first indices
    void validate() const;
  };

  explicit DistributedSampler(Options options);

  /// Called by the plugin that owns data parallelism (Booster::boost).
  void shard(int rank, int num_replicas);

  void set_epoch(int64_t epoch);
  /// This rank's indices for the current epoch.
  const std::vector<int64_t>& indices() const { return indices_; }
  /// The next `count` indices (fewer at the end of the epoch); advances the position.
  std::vector<int64_t> next(int64_t count);
  /// The next `count` indices, always `count`: when the epoch runs out the rest come from the
  /// next epoch (which it starts).
  std::vector<int64_t> next_across_epochs(int64_t count);
  bool epoch_done() const { return position_ >= static_cast<int64_t>(indices_.size()); }
  int64_t samples_per_rank() const { return static_cast<int64_t>(indices_.size()); }

  /// Epoch and position; loading onto a different number of ranks resumes at the same point of
  /// the epoch's global order (the order depends only on the seed and epoch, not on the ranks).
  std::map<std::string, int64_t> state_dict() const;
  void load_state_dict(const std::map<std::string, int64_t>& state);
  /// Samples read so far this epoch, over all ranks.
  int64_t consumed_samples() const;
  int64_t epoch() const { return epoch_; }

  int rank() const { return rank_; }
  int num_replicas() const { return num_replicas_; }

 private:
  void build();

  Options options_;
  int rank_ = 0;
  int num_replicas_ = 1;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace colossal::data
