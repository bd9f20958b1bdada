#include "core/inference/block_manager.h"

#include <algorithm>

#include "core/common/check.h"

namespace colossal::inference {

BlockManager::BlockManager(int64_t num_blocks, int64_t block_size) : num_blocks_(num_blocks), block_size_(block_size) {
  COLOSSAL_CHECK(num_blocks > 0, "[inference] KV cache: expected at least one block, got ", num_blocks);
  COLOSSAL_CHECK(block_size > 0, "[inference] KV cache: block_size must be > 0, got ", block_size);
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
  refs_.assign(static_cast<size_t>(num_blocks), 0);
  hash_of_.assign(static_cast<size_t>(num_blocks), 0);
  registered_.assign(static_cast<size_t>(num_blocks), 0);
  lru_pos_.resize(static_cast<size_t>(num_blocks));
}

int64_t BlockManager::blocks_missing(SeqId seq, int64_t tokens) const {
  auto it = tables_.find(seq);
  int64_t have = it == tables_.end() ? 0 : static_cast<int64_t>(it->second.size());
  return std::max<int64_t>(0, blocks_for(tokens) - have);
}

// An unused block if there is one, else the cached block released longest ago (forgotten).
int32_t BlockManager::take_block() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else {
    b = evictable_.front();
    evictable_.pop_front();
    forget(b);
  }
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void BlockManager::forget(int32_t b) {
  const auto i = static_cast<size_t>(b);
  if (!registered_[i]) return;
  cached_.erase(hash_of_[i]);
  registered_[i] = 0;
}

void BlockManager::drop_reference(int32_t b) {
  const auto i = static_cast<size_t>(b);
  if (--refs_[i] > 0) return;
  if (registered_[i]) {
    evictable_.push_back(b);
    lru_pos_[i] = std::prev(evictable_.end());
  } else {
    free_.push_back(b);
  }
}

bool BlockManager::reserve(SeqId seq, int64_t tokens) {
  int64_t missing = blocks_missing(seq, tokens);
  if (missing > free_blocks()) return false;
  auto& t = tables_[seq];
  for (int64_t i = 0; i < missing; ++i) t.push_back(take_block());
  return true;
}

void BlockManager::release(SeqId seq) {
  auto it = tables_.find(seq);
  if (it == tables_.end()) return;
  for (auto b = it->second.rbegin(); b != it->second.rend(); ++b)
    if (*b >= 0) drop_reference(*b);  // blocks released early (release_before) are -1
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
    drop_reference(id);
    id = -1;
    ++freed;
  }
  return freed;
}

int64_t BlockManager::take_cached_prefix(SeqId seq, const std::vector<uint64_t>& hashes,
                                         const std::vector<int64_t>& tokens) {
  COLOSSAL_CHECK(!has(seq), "[inference] sequence ", seq, " already holds blocks: a cached prefix starts a table");
  std::vector<int32_t> taken;
  for (size_t k = 0; k < hashes.size(); ++k) {
    auto it = cached_.find(hashes[k]);
    if (it == cached_.end() || static_cast<int64_t>(tokens.size()) < static_cast<int64_t>(k + 1) * block_size_ ||
        !std::equal(it->second.tokens.begin(), it->second.tokens.end(),
                    tokens.begin() + static_cast<std::ptrdiff_t>(k) * block_size_))
      break;
    const int32_t b = it->second.block;
    if (refs_[static_cast<size_t>(b)]++ == 0) evictable_.erase(lru_pos_[static_cast<size_t>(b)]);
    taken.push_back(b);
  }
  if (!taken.empty()) tables_[seq] = taken;
  return static_cast<int64_t>(taken.size());
}

void BlockManager::register_block(SeqId seq, int64_t index, uint64_t hash, const int64_t* tokens) {
  const auto& t = table(seq);
  COLOSSAL_CHECK(index >= 0 && index < static_cast<int64_t>(t.size()), "[inference] sequence ", seq, ": block ",
                 index, " of ", t.size());
  const int32_t b = t[static_cast<size_t>(index)];
  if (b < 0 || registered_[static_cast<size_t>(b)] || cached_.count(hash)) return;
  cached_[hash] = Cached{b, std::vector<int64_t>(tokens, tokens + block_size_)};
  hash_of_[static_cast<size_t>(b)] = hash;
  registered_[static_cast<size_t>(b)] = 1;
}

void BlockManager::clear_cache() {
  for (int32_t b : evictable_) {
    registered_[static_cast<size_t>(b)] = 0;
    free_.push_back(b);
  }
  evictable_.clear();
  for (auto& [hash, c] : cached_) registered_[static_cast<size_t>(c.block)] = 0;
  cached_.clear();
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
