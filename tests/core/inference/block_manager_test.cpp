// The KV cache's block bookkeeping: reservations grow by whole blocks, a refused one takes
// nothing, slots follow the block table, releases return every block; prefix caching shares
// registered blocks by reference count and evicts the least recently released first.
#include "core/inference/block_manager.h"

#include <gtest/gtest.h>

#include "tests/support/errors.h"

namespace colossal::inference {
namespace {

TEST(BlockManager, AllocatesFreesAndRefusesWhenExhausted) {
  BlockManager m(5, 4);
  EXPECT_EQ(m.free_blocks(), 5);
  EXPECT_TRUE(m.reserve(1, 9));  // 3 blocks
  EXPECT_EQ(m.table(1).size(), 3u);
  EXPECT_TRUE(m.reserve(1, 12));  // still 3
  EXPECT_EQ(m.free_blocks(), 2);
  EXPECT_FALSE(m.reserve(2, 13)) << "4 blocks wanted, 2 free";
  EXPECT_EQ(m.free_blocks(), 2) << "a refused reservation takes nothing";
  EXPECT_FALSE(m.has(2));
  EXPECT_TRUE(m.reserve(2, 8));
  EXPECT_EQ(m.free_blocks(), 0);
  // Slots: block id x block size + offset.
  EXPECT_EQ(m.slot(1, 5), m.table(1)[1] * 4 + 1);
  auto msg = testing::error_message_of([&] { m.slot(2, 8); });
  EXPECT_NE(msg.find("position 8 is beyond its 2 reserved block(s)"), std::string::npos) << msg;
  m.release(1);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_TRUE(m.table(1).empty());
  m.release(1);  // twice is harmless
  EXPECT_EQ(m.free_blocks(), 3);
}

TEST(BlockManager, CachedPrefixesAreSharedCountedAndEvictedOldestFirst) {
  BlockManager m(4, 2);
  std::vector<int64_t> tokens = {5, 6, 7, 8, 9};
  ASSERT_TRUE(m.reserve(1, 5));  // 3 blocks
  m.register_block(1, 0, 100, tokens.data());
  m.register_block(1, 1, 101, tokens.data() + 2);
  EXPECT_EQ(m.cached_blocks(), 2);
  // A second sequence with the same first four tokens shares both blocks.
  EXPECT_EQ(m.take_cached_prefix(2, {100, 101}, tokens), 2);
  EXPECT_EQ(m.table(2), std::vector<int32_t>(m.table(1).begin(), m.table(1).begin() + 2));
  EXPECT_EQ(m.used_blocks(), 3) << "shared, not copied";
  // Same hash, other tokens (a collision): not served.
  std::vector<int64_t> other = {5, 6, 1, 1};
  EXPECT_EQ(m.take_cached_prefix(3, {100, 101}, other), 1);
  m.release(3);
  m.release(1);
  EXPECT_EQ(m.used_blocks(), 2) << "sequence 2 still holds the two cached blocks; the third is free";
  m.release(2);
  EXPECT_EQ(m.used_blocks(), 0);
  EXPECT_EQ(m.free_blocks(), 4) << "cached blocks nobody holds count as free";
  EXPECT_EQ(m.cached_blocks(), 2) << "and stay cached";
  // Taking every block evicts both cached ones, and their hashes go with them.
  ASSERT_TRUE(m.reserve(4, 8));
  EXPECT_EQ(m.cached_blocks(), 0);
  EXPECT_EQ(m.take_cached_prefix(5, {100}, tokens), 0);
  m.release(4);
  // Eviction order: only as many as needed, the longest-released first.
  ASSERT_TRUE(m.reserve(6, 4));
  m.register_block(6, 0, 200, tokens.data());
  m.register_block(6, 1, 201, tokens.data() + 2);
  m.release(6);  // releases block 201's first, then 200's: 200 is the most recently released
  ASSERT_TRUE(m.reserve(7, 6)) << "two free blocks and one evicted";
  EXPECT_EQ(m.cached_blocks(), 1);
  EXPECT_EQ(m.take_cached_prefix(8, {200}, tokens), 1) << "the most recently released one survived";
  m.clear_cache();
  EXPECT_EQ(m.cached_blocks(), 0);
  m.release(8);
  m.release(7);
  EXPECT_EQ(m.free_blocks(), 4);
  EXPECT_EQ(m.used_blocks(), 0);
}

}  // namespace
}  // namespace colossal::inference
