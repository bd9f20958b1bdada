#include "core/data/distributed_sampler.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "core/common/check.h"

namespace colossal::data {

void DistributedSampler::Options::validate() const {
  COLOSSAL_CHECK(dataset_size > 0, "[sampler] dataset_size: expected > 0, got ", dataset_size);
}

DistributedSampler::DistributedSampler(Options options) : options_(options) {
  options_.validate();
  build();
}

void DistributedSampler::shard(int rank, int num_replicas) {
  COLOSSAL_CHECK(num_replicas >= 1 && rank >= 0 && rank < num_replicas,
                 "[sampler] expected 0 <= rank < num_replicas, got ", rank, " of ", num_replicas);
  COLOSSAL_CHECK(!options_.drop_last || options_.dataset_size >= num_replicas,
                 "[sampler] drop_last with ", options_.dataset_size, " samples leaves nothing for ",
                 num_replicas, " ranks");
  rank_ = rank;
  num_replicas_ = num_replicas;
  position_ = 0;
  build();
}

void DistributedSampler::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  build();
}

void DistributedSampler::build() {
  std::vector<int64_t> all(options_.dataset_size);
  std::iota(all.begin(), all.end(), 0);
  if (options_.shuffle) {
    // A fixed engine and our own Fisher-Yates: std::shuffle's algorithm is unspecified, and
    // every rank (and every build) must produce the same permutation.
    std::mt19937_64 rng(options_.seed * 1000003ull + static_cast<uint64_t>(epoch_));
    for (int64_t i = options_.dataset_size - 1; i > 0; --i) {
      auto j = static_cast<int64_t>(rng() % static_cast<uint64_t>(i + 1));
      std::swap(all[i], all[j]);
    }
  }
  int64_t n = num_replicas_;
  int64_t total = options_.drop_last ? (options_.dataset_size / n) * n
                                     : ((options_.dataset_size + n - 1) / n) * n;
  for (int64_t i = options_.dataset_size; i < total; ++i) all.push_back(all[i % options_.dataset_size]);
  all.resize(total);
  indices_.clear();
  for (int64_t i = rank_; i < total; i += n) indices_.push_back(all[i]);
}

std::vector<int64_t> DistributedSampler::next(int64_t count) {
  int64_t end = std::min<int64_t>(position_ + count, static_cast<int64_t>(indices_.size()));
  std::vector<int64_t> out(indices_.begin() + position_, indices_.begin() + end);
  position_ = end;
  return out;
}

std::vector<int64_t> DistributedSampler::next_across_epochs(int64_t count) {
  auto out = next(count);
  if (static_cast<int64_t>(out.size()) < count) {
    set_epoch(epoch_ + 1);
    auto more = next(count - static_cast<int64_t>(out.size()));
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

std::map<std::string, int64_t> DistributedSampler::state_dict() const {
  return {{"epoch", epoch_}, {"position", position_}, {"num_replicas", num_replicas_}};
}

void DistributedSampler::load_state_dict(const std::map<std::string, int64_t>& state) {
  for (const char* key : {"epoch", "position", "num_replicas"}) {
    COLOSSAL_CHECK(state.count(key), "[sampler] state: missing '", key, "'");
  }
  set_epoch(state.at("epoch"));
  // Rank r reads entries r, r+n, r+2n, ... of the epoch's shuffled order, so after `position`
  // reads on each of n ranks exactly the first position x n entries are consumed: on n' ranks
  // the same point is position x n / n' (rounded down: a few samples may be read twice when
  // that does not divide, none skipped).
  const int64_t saved_n = state.at("num_replicas");
  COLOSSAL_CHECK(saved_n >= 1, "[sampler] state: num_replicas must be >= 1, got ", saved_n);
  const int64_t consumed = state.at("position") * saved_n;
  position_ = std::min<int64_t>(consumed / num_replicas_, static_cast<int64_t>(indices_.size()));
}

int64_t DistributedSampler::consumed_samples() const { return position_ * num_replicas_; }

}  // namespace colossal::data
