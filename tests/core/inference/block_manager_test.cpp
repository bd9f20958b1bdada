// The KV cache's block bookkeeping: reservations grow by whole blocks, a refused one takes
// nothing, slots follow the block table, releases return every block.
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

}  // namespace
}  // namespace colossal::inference
