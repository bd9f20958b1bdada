#pragma once
// The paged KV cache's bookkeeping: a pool of fixed-size blocks (block_size tokens each) and a
// block table per sequence. Blocks are taken on demand as a sequence grows and all returned
// when it ends or is preempted; under a sliding window, those behind the window as it moves. Nothing here touches tensors (see kv_cache.h).
#include <cstdint>
#include <unordered_map>
#include <vector>

namespace colossal::inference {

using SeqId = int64_t;

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }
  int64_t used_blocks() const { return num_blocks_ - free_blocks(); }

  /// Blocks needed to hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  /// Extra blocks `seq` needs to hold `tokens` tokens in all.
  int64_t blocks_missing(SeqId seq, int64_t tokens) const;
  /// Grows `seq`'s table to hold `tokens` tokens. Returns false (and takes nothing) when the
  /// pool does not have enough free blocks.
  bool reserve(SeqId seq, int64_t tokens);
  /// Returns every block of `seq` to the pool (no-op for an unknown sequence).
  void release(SeqId seq);
  /// Sliding-window attention: returns the blocks of `seq` that hold only positions before `pos`
  /// (no token will look at them again); their table entries become -1 so later positions keep
  /// their blocks' indices. Returns how many were freed.
  int64_t release_before(SeqId seq, int64_t pos);
  /// Blocks `seq` holds now (its table less the ones released early).
  int64_t held_blocks(SeqId seq) const;

  /// Physical block ids of `seq`, in token order (empty for an unknown sequence).
  const std::vector<int32_t>& table(SeqId seq) const;
  /// Cache slot (block * block_size + offset) of token position `pos` of `seq`.
  int64_t slot(SeqId seq, int64_t pos) const;
  bool has(SeqId seq) const { return tables_.count(seq) != 0; }

 private:
  int64_t num_blocks_, block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::unordered_map<SeqId, std::vector<int32_t>> tables_;
};

}  // namespace colossal::inference
