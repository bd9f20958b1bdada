#include "core/data/distributed_sampler.h"

#include <gtest/gtest.h>

#include <set>

#include "tests/support/errors.h"

namespace colossal::data {
namespace {

TEST(DistributedSampler, RanksPartitionTheShuffledEpoch) {
  for (bool drop_last : {false, true}) {
    const int n = 3;
    std::multiset<int64_t> seen;
    std::vector<std::vector<int64_t>> per_rank;
    for (int r = 0; r < n; ++r) {
      DistributedSampler s({.dataset_size = 10, .shuffle = true, .seed = 5, .drop_last = drop_last});
      s.shard(r, n);
      per_rank.push_back(s.indices());
      seen.insert(s.indices().begin(), s.indices().end());
    }
    for (auto& v : per_rank) EXPECT_EQ(v.size(), per_rank[0].size()) << "equal share per rank";
    if (drop_last) {
      EXPECT_EQ(seen.size(), 9u);
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 9u) << "no repeats";
    } else {
      EXPECT_EQ(seen.size(), 12u);  // padded to a multiple of 3
      EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 10u) << "every sample read";
    }
  }
}

TEST(DistributedSampler, DeterministicPerEpochAndResumable) {
  DistributedSampler a({.dataset_size = 100, .seed = 1}), b({.dataset_size = 100, .seed = 1});
  a.shard(1, 4);
  b.shard(1, 4);
  EXPECT_EQ(a.indices(), b.indices());
  auto first = a.indices();
  a.set_epoch(1);
  EXPECT_NE(a.indices(), first) << "a new epoch reshuffles";
  auto head = a.next(7);
  EXPECT_EQ(head.size(), 7u);
  auto state = a.state_dict();
  DistributedSampler c({.dataset_size = 100, .seed = 1});
  c.shard(1, 4);
  c.load_state_dict(state);
  EXPECT_EQ(c.next(5), a.next(5)) << "resumes at the saved position";
  auto bad = state;
  bad.erase("position");
  auto msg = testing::error_message_of([&] { c.load_state_dict(bad); });
  EXPECT_NE(msg.find("missing 'position'"), std::string::npos) << msg;
}

// The global order (step by step, over all ranks) depends on the seed only: reading batches of
// B / n per rank on n ranks consumes the same global batches as one rank reading B.
std::vector<std::vector<int64_t>> global_batches(int n, int64_t batch, int steps, int64_t size, int64_t skip = 0) {
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < n; ++r) {
    ranks.emplace_back(DistributedSampler::Options{.dataset_size = size, .seed = 9});
    ranks.back().shard(r, n);
    ranks.back().set_epoch(2);
    ranks.back().next(skip / n);
  }
  std::vector<std::vector<int64_t>> out;
  for (int s = 0; s < steps; ++s) {
    std::vector<int64_t> b;
    for (auto& r : ranks) {
      auto part = r.next(batch / n);
      b.insert(b.end(), part.begin(), part.end());
    }
    std::sort(b.begin(), b.end());
    out.push_back(b);
  }
  return out;
}

TEST(DistributedSampler, SameSeedSameGlobalOrderOnAnyNumberOfRanks) {
  auto one = global_batches(1, 12, 5, 97);
  EXPECT_EQ(global_batches(2, 12, 5, 97), one);
  EXPECT_EQ(global_batches(3, 12, 5, 97), one);
  EXPECT_EQ(global_batches(4, 12, 5, 97), one);
}

TEST(DistributedSampler, ResumesOnADifferentNumberOfRanksWhereItStopped) {
  // 4 ranks read 3 batches of 12, save; 2 ranks (and 3, 1) continue with the 4th batch.
  std::vector<DistributedSampler> four;
  for (int r = 0; r < 4; ++r) {
    four.emplace_back(DistributedSampler::Options{.dataset_size = 97, .seed = 9});
    four.back().shard(r, 4);
    four.back().set_epoch(2);
    four.back().next(9);
  }
  auto state = four[0].state_dict();
  EXPECT_EQ(four[0].consumed_samples(), 36);
  auto expected = global_batches(1, 12, 4, 97).back();
  for (int n : {1, 2, 3}) {
    std::vector<int64_t> b;
    for (int r = 0; r < n; ++r) {
      DistributedSampler s({.dataset_size = 97, .seed = 9});
      s.shard(r, n);
      s.load_state_dict(state);
      EXPECT_EQ(s.consumed_samples(), 36);
      auto part = s.next(12 / n);
      b.insert(b.end(), part.begin(), part.end());
    }
    std::sort(b.begin(), b.end());
    EXPECT_EQ(b, expected) << "on " << n << " ranks";
  }
}

}  // namespace
}  // namespace colossal::data
