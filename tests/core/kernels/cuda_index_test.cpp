// The CUDA kernels' division of work (kernels/cuda/index_math.h), checked on the CPU: the kernels
// run only on a GPU, but the arithmetic that decides which block touches which element, query
// head and cache position is the same code here, and every piece must be covered exactly once.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/index_math.h"
#include "kernels/cuda/paged_attention.h"

namespace colossal::kernels::cuda {
namespace {

TEST(CudaIndexMath, AdamWChunksCoverEveryElementOfEveryTensorOnce) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    const int count = 1 + static_cast<int>(rng() % 40);
    std::vector<AdamWTensor> table(static_cast<size_t>(count));
    for (auto& t : table) {
      const int kind = static_cast<int>(rng() % 5);  // empty, tiny, one chunk exactly, odd, large
      t.size = kind == 0 ? 0 : kind == 1 ? 1 + rng() % 7 : kind == 2 ? kAdamWChunk : kind == 3 ? 4097 : 100003;
    }
    const int64_t total = index::plan_chunks(table.data(), count, kAdamWChunk);
    std::vector<std::vector<int>> seen(static_cast<size_t>(count));
    for (int i = 0; i < count; ++i) seen[static_cast<size_t>(i)].assign(static_cast<size_t>(table[i].size), 0);
    for (int64_t chunk = 0; chunk < total; ++chunk) {
      const int e = index::entry_of_chunk(table.data(), count, chunk);
      ASSERT_GE(e, 0);
      ASSERT_LT(e, count);
      const auto& t = table[static_cast<size_t>(e)];
      const int64_t begin = (chunk - t.first_chunk) * kAdamWChunk;
      ASSERT_GE(begin, 0) << "chunk " << chunk;
      ASSERT_LT(begin, t.size) << "chunk " << chunk << " maps past tensor " << e;
      for (int64_t i = begin; i < std::min(begin + kAdamWChunk, t.size); ++i) ++seen[static_cast<size_t>(e)][static_cast<size_t>(i)];
    }
    for (int i = 0; i < count; ++i)
      for (size_t j = 0; j < seen[static_cast<size_t>(i)].size(); ++j)
        ASSERT_EQ(seen[static_cast<size_t>(i)][j], 1) << "tensor " << i << " element " << j << " (trial " << trial << ")";
  }
}

TEST(CudaIndexMath, PagedAttentionBlocksServeEveryQueryHeadOnceFromItsKvHead) {
  for (auto [heads, kv] : std::vector<std::pair<int64_t, int64_t>>{
           {8, 2}, {4, 4}, {12, 1}, {32, 8}, {20, 2}, {64, 1}, {1, 1}, {40, 5}}) {
    std::vector<int> served(static_cast<size_t>(heads), 0);
    const int64_t blocks = kv * index::blocks_per_kv_head(heads, kv, 8);
    for (int64_t y = 0; y < blocks; ++y) {
      const auto b = index::head_block(y, heads, kv, 8);
      ASSERT_GE(b.heads, 1) << heads << "/" << kv << " block " << y;
      ASSERT_LE(b.heads, 8);
      for (int h = 0; h < b.heads; ++h) {
        const int64_t head = b.first_head + h;
        ASSERT_LT(head, heads);
        EXPECT_EQ(head / (heads / kv), b.kv_head) << "head " << head << " must read kv head " << head / (heads / kv);
        ++served[static_cast<size_t>(head)];
      }
    }
    for (int64_t h = 0; h < heads; ++h) EXPECT_EQ(served[static_cast<size_t>(h)], 1) << heads << "/" << kv << " head " << h;
  }
}

TEST(CudaIndexMath, SplitsCoverEveryVisiblePositionOnce) {
  for (int64_t max_context : {1, 7, 511, 512, 513, 1100, 4096, 4097}) {
    const int64_t splits = index::splits_for(max_context, kSplitPositions);
    EXPECT_EQ(splits == 1, max_context <= kSplitPositions) << max_context;
    for (int64_t context : {int64_t{0}, int64_t{1}, max_context / 3, max_context - 1, max_context}) {
      std::vector<int> seen(static_cast<size_t>(context), 0);
      for (int s = 0; s < splits; ++s) {
        const auto r = index::split_range(s, static_cast<int>(splits), static_cast<int>(context), kSplitPositions);
        for (int j = r.begin; j < r.end; ++j) {
          ASSERT_GE(j, 0);
          ASSERT_LT(j, context) << "split " << s << " reads past the context";
          ++seen[static_cast<size_t>(j)];
        }
      }
      for (int64_t j = 0; j < context; ++j)
        ASSERT_EQ(seen[static_cast<size_t>(j)], 1) << "context " << context << " of " << max_context << ", position " << j;
    }
  }
}

}  // namespace
}  // namespace colossal::kernels::cuda
