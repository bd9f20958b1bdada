#pragma once
// The paged KV cache's bookkeeping: a pool of fixed-size blocks (block_size tokens each) and a
// block table per sequence. Blocks are taken on demand as a sequence grows and all returned
// when it ends or is preempted; under a sliding window, those behind the window as it moves.
// Nothing here touches tensors (see kv_cache.h).
//
// Prefix caching (vLLM's automatic prefix caching): a full block whose keys and values are
// computed can be registered under the hash of its tokens and of everything before it (the
// engine chains the hashes). A later sequence whose tokens start the same way takes those blocks
// into its table instead of computing them again: blocks are reference-counted, and one no
// sequence holds stays cached, evictable, until the pool needs it (least recently released
// first). Shared blocks are never written: a sequence only writes past its matched prefix.
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace colossal::inference {

using SeqId = int64_t;

class BlockManager {
 public:
  BlockManager(int64_t num_blocks, int64_t block_size);

  int64_t block_size() const { return block_size_; }
  int64_t num_blocks() const { return num_blocks_; }
  /// Blocks a sequence can take: unused ones and cached ones nobody holds (evicted on demand).
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size() + evictable_.size()); }
  int64_t used_blocks() const { return num_blocks_ - free_blocks(); }

  /// Blocks needed to hold `tokens` tokens.
  int64_t blocks_for(int64_t tokens) const { return (tokens + block_size_ - 1) / block_size_; }
  /// Extra blocks `seq` needs to hold `tokens` tokens in all.
  int64_t blocks_missing(SeqId seq, int64_t tokens) const;
  /// Grows `seq`'s table to hold `tokens` tokens. Returns false (and takes nothing) when the
  /// pool does not have enough free blocks.
  bool reserve(SeqId seq, int64_t tokens);
  /// Returns every block of `seq` to the pool (no-op for an unknown sequence); a cached block
  /// goes on holding its tokens until it is evicted.
  void release(SeqId seq);

  /// Prefix caching: starts `seq`'s table (it must have none) with the cached blocks of `hashes`
  /// (chained block hashes, in order) as long as each is cached with the same `tokens`
  /// (block_size per hash); returns how many were taken.
  int64_t take_cached_prefix(SeqId seq, const std::vector<uint64_t>& hashes, const std::vector<int64_t>& tokens);
  /// Registers block `index` of `seq`'s table (full, computed) under `hash` with its tokens (a
  /// block already cached under that hash, or a block already registered, is left as it is).
  void register_block(SeqId seq, int64_t index, uint64_t hash, const int64_t* tokens);
  /// Cached blocks (held or evictable).
  int64_t cached_blocks() const { return static_cast<int64_t>(cached_.size()); }
  /// Forgets every cached block (the model's weights changed): held ones stay with their sequences.
  void clear_cache();
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
  int32_t take_block();
  void drop_reference(int32_t block);
  void forget(int32_t block);

  int64_t num_blocks_, block_size_;
  std::vector<int32_t> free_;  // a stack: the most recently freed block is reused first
  std::unordered_map<SeqId, std::vector<int32_t>> tables_;
  // Prefix caching.
  struct Cached {
    int32_t block;
    std::vector<int64_t> tokens;  // compared on a hit, so a hash collision cannot serve wrong keys
  };
  std::vector<int32_t> refs_;                  // per block: tables holding it
  std::vector<uint64_t> hash_of_;              // per block: its hash, where registered
  std::vector<uint8_t> registered_;            // per block
  std::unordered_map<uint64_t, Cached> cached_;
  std::list<int32_t> evictable_;               // cached, held by nobody; the front goes first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
};

}  // namespace colossal::inference
