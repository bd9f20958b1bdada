#include "core/inference/block_manager.h"

#include <algorithm>

#include "core/common/check.h"

namespace colossal::inference {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size) : num_blocks_(num_blocks), block_size_(block_size) {
  COLOSSAL_CHECK(num_blocks > 0, "[inference] KV cache: expected at least one block, got ", num_blocks);
  COLOSSAL_CHECK(block_size > 0, "[inference] KV cache: block_size must be > 0, got ", block_size);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

int64_t BlockManager::blocks_missing(SeqId seq, int64_t tokens) const {
  auto it = tables_.find(seq);
  int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size());
  return std::max<int64_t>(0, blocks_for(tokens) - have);
}

bool BlockManager::reserve(SeqId seq, int64_t tokens) {
  int64_t missing = blocks_missing(seq, tokens);
  if (missing > free_blocks()) return false;
  auto& t = tables_[seq];
  for (int64_t i = 0; i < missing; ++i) {
    t.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void BlockManager::release(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b)
    if (*b >= 0) free_.push_back(*b);  // blocks released early (release_before) are -1
  tables_.erase(it);
}

int64_t BlockManager::release_before(SeqId seq, int64_t pos) {
  auto it = tables_.find(seq);
  if (it == tables_.end() || pos <= 0) return 0;
  int64_t freed = 0;
  const int64_t whole = std::min<int64_t>(pos / block_size_, static_cast<int64_t>(it->second.size()));
  for (int64_t b = 0; b < whole; ++b) {
    auto& id = it->second[static_cast<size_t>(b)];
    if (id < 0) continue;
    free_.push_back(id);
    id = -1;
    ++freed;
  }
  return freed;
}

int64_t BlockManager::held_blocks(SeqId seq) const {
  const auto& t = table(seq);
  return static_cast<int64_t>(std::count_if(t.begin(), t.end(), [](int32_t b) { return b >= 0; }));
}

const std::vector<int32_t>& BlockManager::table(SeqId seq) const {
  static const std::vector<int32_t> empty;
  auto it = tables_.find(seq);
  return it == tables_.end() ? empty : it->second;
}

int64_t BlockManager::slot(SeqId seq, int64_t pos) const {
  const auto& t = table(seq);
  int64_t b = pos / block_size_;
  COLOSSAL_CHECK(b < static_cast<int64_t>(t.size()), "[inference] sequence ", seq, ": position ", pos,
                 " is beyond its ", t.size(), " reserved block(s)");
  COLOSSAL_CHECK(t[static_cast<size_t>(b)] >= 0, "[inference] sequence ", seq, ": position ", pos,
                 " lies in a block released as outside the sliding window");
  return static_cast<int64_t>(t[static_cast<size_t>(b)]) * block_size_ + pos % block_size_;
}

}  // namespace colossal::inference
