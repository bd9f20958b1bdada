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
  DistributedSampler d({.dataset_size = 100, .seed = 1});
  d.shard(0, 2);
  auto msg = testing::error_message_of([&] { d.load_state_dict(state); });
  EXPECT_NE(msg.find("saved with 4 data-parallel ranks, this run has 2"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::data
