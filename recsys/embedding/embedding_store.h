#pragma once
// Where an embedding table's rows live and how a batch reads and updates them. Two stores:
//
//   ResidentEmbeddingBag  the table is the weight the forward reads (host memory, or a file on
//                         the offload disk mapped into memory)
//   CachedEmbeddingBag    the table stays in its tier; a cache of hot rows is what the forward
//                         reads (cached_embedding.h)
//
// Both train the same way: forward() (differentiable, sparse gradient), the backward, then
// step() — or gradients(), a merge with other ranks' gradients, and apply() — updates only the
// rows the batch touched with a row-wise optimizer (sparse_optimizer.h). A store may hold a
// slice of a larger table (a shard: rows [row_begin, row_begin + rows) and columns
// [col_begin, col_begin + dim) of a total_rows x total_dim table); it starts from that slice's
// values, so every sharding of a table starts from the same numbers (table_init.h).
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "recsys/embedding/sparse_optimizer.h"

namespace colossal::recsys {

struct EmbeddingStoreOptions {
  int64_t rows = 0, dim = 16;
  // The cache (CachedEmbeddingBag only)
  double cache_ratio = 0.1;      // cache slots as a share of the rows (at least one batch's ids)
  int64_t min_slots = 4096;      // small tables are cached whole (up to this many rows)
  std::string eviction = "lfu";  // lfu | lru
  std::string pooling = "sum";   // sum | mean
  SparseOptimizerOptions optimizer;
  uint64_t seed = 0;             // the table's initial values: uniform(+-1/sqrt(total rows))
  /// "": the table and its optimizer state in host memory; else in a memory-mapped file in this
  /// directory (core/offload/mapped_tensor.h): tables larger than memory.
  std::string offload_dir;
  int io_threads = 0;  // cache misses copied at once (0: 16 on the offload disk, else 1)
  // The slice of a larger table this store holds (0: the whole table is rows x dim).
  int64_t total_rows = 0, total_dim = 0, row_begin = 0, col_begin = 0;
  void validate() const;
};
using CachedEmbeddingOptions = EmbeddingStoreOptions;

struct CacheStats {
  int64_t lookups = 0, hits = 0, misses = 0, evictions = 0;
  double hit_rate() const { return lookups ? static_cast<double>(hits) / lookups : 0.0; }
  CacheStats& operator+=(const CacheStats& o) {
    lookups += o.lookups, hits += o.hits, misses += o.misses, evictions += o.evictions;
    return *this;
  }
};

class EmbeddingStore {
 public:
  virtual ~EmbeddingStore() = default;
  /// Pooled embeddings [B, dim] of the bags (ids, offsets as torch::embedding_bag takes them);
  /// differentiable, with a sparse gradient.
  virtual torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& offsets) = 0;
  /// The same without a gradient and without changing what is cached (evaluation).
  virtual torch::Tensor lookup(const torch::Tensor& ids, const torch::Tensor& offsets) = 0;
  /// The unique rows the last forward read and their gradients [rows, dim] (summed over the
  /// batch), for a caller that merges them across ranks before apply().
  virtual std::pair<torch::Tensor, torch::Tensor> gradients() const = 0;
  /// Updates rows `ids` with `grads`; clears the gradient.
  virtual void apply(const torch::Tensor& ids, const torch::Tensor& grads) = 0;
  void step() {
    const auto [rows, grads] = gradients();
    apply(rows, grads);
  }
  /// Admits `ids` ahead of the batch that uses them (look-ahead prefetch).
  virtual void prefetch(const torch::Tensor& ids) {}
  /// Asks the table's tier to start reading the rows of `ids` (a mapped file: the kernel reads
  /// their pages in the background); returns at once.
  virtual void advise(const torch::Tensor& ids) const;
  /// Seeds the cache with the most frequent rows (counts[row]).
  virtual void warm_up(const std::vector<int64_t>& counts) {}
  /// Brings the table up to date (a cache writes its rows back).
  virtual void flush() {}
  /// Forgets anything held besides the table (after the table was written in place).
  virtual void drop_cache() {}
  /// The table [rows, dim] and its optimizer state [rows, state width]; current after flush().
  virtual const torch::Tensor& table() const = 0;
  virtual const torch::Tensor& state() const = 0;
  virtual CacheStats stats() const { return {}; }
  virtual void reset_stats() {}
  const EmbeddingStoreOptions& options() const { return options_; }

 protected:
  explicit EmbeddingStore(EmbeddingStoreOptions options);
  int64_t bag_mode() const { return options_.pooling == "mean" ? 1 : 0; }  // torch::embedding_bag's
  /// apply()'s inputs as contiguous int64 rows and float gradients, checked (shapes, every row
  /// inside the table).
  std::pair<torch::Tensor, torch::Tensor> checked_updates(const torch::Tensor& ids, const torch::Tensor& grads,
                                                          const char* who) const;
  /// A new [rows, width] float tensor in the store's tier (host memory or the offload disk).
  torch::Tensor allocate(int64_t width, const std::string& what) const;
  EmbeddingStoreOptions options_;
};

/// The table itself is the weight the forward reads.
class ResidentEmbeddingBag : public EmbeddingStore {
 public:
  explicit ResidentEmbeddingBag(EmbeddingStoreOptions options);
  torch::Tensor forward(const torch::Tensor& ids, const torch::Tensor& offsets) override;
  torch::Tensor lookup(const torch::Tensor& ids, const torch::Tensor& offsets) override;
  std::pair<torch::Tensor, torch::Tensor> gradients() const override;
  void apply(const torch::Tensor& ids, const torch::Tensor& grads) override;
  const torch::Tensor& table() const override { return weight_; }
  const torch::Tensor& state() const override { return state_; }

 private:
  torch::Tensor weight_, state_;  // weight_ is a leaf that collects (sparse) gradients
  torch::Tensor last_rows_;
};

/// A CachedEmbeddingBag when cached, else a ResidentEmbeddingBag.
std::unique_ptr<EmbeddingStore> make_embedding_store(const EmbeddingStoreOptions& options, bool cached);

/// Throws naming the table size when an id (of the sorted unique `rows`) is outside [0, rows).
void check_rows(const torch::Tensor& sorted_unique, int64_t rows, const char* who);

}  // namespace colossal::recsys
