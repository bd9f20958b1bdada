#pragma once
// An embedding bag whose table lives in host memory while a cache of its hot rows is what the
// forward reads (ColossalAI's frequency-aware cached embedding): before a batch, its ids are
// admitted into the cache (a row missing from it is loaded; when the cache is full the least
// frequently — or least recently — used row not needed by this batch is written back to the
// table and its slot reused). The backward leaves gradients on the cache's rows, and step()
// updates only the rows the batch touched with a row-wise (sparse) optimizer whose state travels
// with each row, so cached training is the same computation as keeping the whole table resident.
//
//   CachedEmbeddingBag bag({.rows = 1'000'000, .dim = 16, .cache_ratio = 0.05});
//   bag.warm_up(id_counts);                       // the hottest ids first
//   auto pooled = bag.forward(ids, offsets);      // [B, dim], differentiable
//   loss.backward();
//   bag.step();                                   // touched rows only
//
// With a cache the size of the table (cache_ratio 1) nothing is ever evicted. The cache is
// a tensor on the host here; on a GPU machine it would live in device memory (issue 21). The
// table itself is in host memory or, with offload_dir, in a memory-mapped file on the offload
// disk: tables larger than memory.
#include <torch/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "recsys/embedding/embedding_store.h"

namespace colossal::recsys {

class CachedEmbeddingBag : public EmbeddingStore {
 public:
  explicit CachedEmbeddingBag(CachedEmbeddingOptions options);

  /// Loads the most frequent ids (counts[id]) into the cache, hottest first, and seeds the
  /// frequency counts LFU evicts by.
  void warm_up(const std::vector<int64_t>& counts) override;
  /// Admits `ids` ahead of the batch that uses them (look-ahead prefetch); forward() admits
  /// whatever is still missing. Rows the current batch holds are never evicted for it.
  void prefetch(const torch::Tensor& ids) override;
  /// Pooled embeddings [B, dim] of the bags (ids, offsets as torch::embedding_bag takes them).
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& offsets) override;
  /// The same from the table itself (after a flush), without admitting anything: evaluation
  /// over batches larger than the cache. No gradient.
  torch::Tensor lookup(const torch::Tensor& ids, const torch::Tensor& offsets) override;
  /// The unique table rows the last forward read, and their gradients [rows, dim] (summed over
  /// the batch; in any order), for a caller that merges them across ranks before apply().
  std::pair<torch::Tensor, torch::Tensor> gradients() const override;
  /// Updates the rows `ids` with `grads` (as gradients() gives them, or merged), admitting rows
  /// that are not cached; clears the cache's gradient.
  void apply(const torch::Tensor& ids, const torch::Tensor& grads) override;
  /// Writes every cached row (and its state) back to the table (nothing when no row changed
  /// since the last flush).
  void flush() override;

  /// The whole table (after flush(): current) and its optimizer state.
  const torch::Tensor& table() const override { return table_; }
  const torch::Tensor& state() const override { return state_; }
  /// Replaces table and state (a checkpoint); the cache starts empty.
  void load(const torch::Tensor& table, const torch::Tensor& state);
  /// Forgets the cache without writing it back (the table was replaced in place).
  void drop_cache() override;
  CacheStats stats() const override { return stats_; }
  void reset_stats() override { stats_ = {}; }
  int64_t cache_slots() const { return slots_; }

 private:
  int64_t slot_for(int64_t row, int64_t batch_tag);  // admits the row; its slot, or -1 if none is free
  void write_back(int64_t slot, int64_t row);  // the slot's row and state to the table's row
  void load_row(int64_t slot, int64_t row);    // the table's row and state into the slot
  void run_transfers();                        // the copies slot_for() queued, on io_threads
  std::tuple<double, int64_t, int64_t> key(int64_t slot) const;  // eviction order: (count, time, slot)

  int64_t slots_ = 0;
  torch::Tensor table_, state_;          // [rows, dim], [rows, state width]: the host tier
  torch::Tensor cache_, cache_state_;    // [slots, dim] (a leaf that collects gradients), [slots, state]
  std::vector<int64_t> row_slot_;        // row -> slot, -1 when not cached
  std::vector<int64_t> slot_row_;        // slot -> row, -1 when free
  std::vector<int64_t> slot_tag_;        // the batch that last used the slot (protects it from eviction)
  std::vector<double> frequency_;        // per row: accesses (LFU)
  std::vector<int64_t> last_use_;        // per slot: a clock (LRU)
  std::set<std::tuple<double, int64_t, int64_t>> order_;  // cached slots, least valuable first
  std::vector<int64_t> free_;            // slots holding no row
  struct Transfer {
    int64_t slot, evicted, row;  // write the slot back to `evicted` (if >= 0), then load `row`
  };
  std::vector<Transfer> pending_;
  size_t io_threads_ = 1;
  int64_t clock_ = 0, batch_tag_ = 0;
  bool dirty_ = false;  // a cached row was updated since the last flush
  torch::Tensor last_rows_;  // the last forward's unique rows
  CacheStats stats_;
};

}  // namespace colossal::recsys
