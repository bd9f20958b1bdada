#pragma once
// Embedding tables sharded over the ranks of a group (TorchRec's model-parallel embeddings):
// each rank holds the shards the plan gives it (sharding_plan.h), in a store of its own —
// resident, or cached with the table in host memory or on the offload disk (embedding_store.h)
// — while each rank's batch stays its own (the dense parts run data-parallel).
//
// A training step is three exchanges (all-to-alls over the group):
//   1. ids forward: each rank sends every shard owner the ids of its bags that the shard holds
//      (row-wise: only the ids in the shard's rows; column-wise: all of them), with bag lengths;
//   2. pooled embeddings back: each owner pools its shard's rows per bag (a sum; a mean is taken
//      by the requester over the whole bag) and returns them; the requester concatenates
//      columns and adds row pieces;
//   3. gradients back (step(), after the model's backward): each requester returns the pooled
//      gradients of the pieces it received; each owner runs its shard's backward and updates
//      the touched rows with the row-wise optimizer.
// Gradients are divided by the group size, so N ranks with batches of B/N take the steps one
// process takes with the whole batch B.
//
// Checkpoints: each rank writes its own shards (save()); load() reads every rank's file of a
// checkpoint written with any number of ranks and any plan, and copies the overlapping rows and
// columns (and their optimizer state) into this rank's shards.
#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "recsys/embedding/embedding_store.h"
#include "recsys/embedding/sharding_plan.h"

namespace colossal::dist {
class Group;
}

namespace colossal::recsys {

struct ShardedEmbeddingOptions {
  std::string name = "embeddings";  // names the tables in checkpoints and messages
  std::vector<int64_t> table_sizes;
  int64_t dim = 16;
  std::string pooling = "sum";  // sum | mean
  std::string sharding = "auto";  // auto | table | row | column
  bool cached = false;          // shards are CachedEmbeddingBags (store.cache_ratio of their rows)
  EmbeddingStoreOptions store;  // optimizer, cache, offload_dir; store.seed seeds every table
  double memory_per_rank = 0;   // bytes a rank may hold for tables (0: no limit)
  /// Table i's seed (the same as the replicated tables', so both start from the same values).
  uint64_t table_seed(size_t i) const;
};

class ShardedEmbeddings {
 public:
  /// `group` null (or of one rank): every shard is local.
  ShardedEmbeddings(ShardedEmbeddingOptions options, const dist::Group* group);

  /// Per table, the pooled embeddings [B, dim] of this rank's bags. Training: leaves that
  /// collect the model's gradients for step(); otherwise no gradient and the caches unchanged.
  /// Every rank of the group calls it together.
  std::vector<torch::Tensor> forward(const std::vector<torch::Tensor>& ids, const std::vector<torch::Tensor>& offsets,
                                     bool training);
  /// After the backward of the last training forward: the shards' rows updated. Collective.
  void step();

  /// Seeds the caches of table `t`'s local shards with the counts of their rows.
  void warm_up(size_t table, const std::vector<int64_t>& counts);
  /// Tells the local shards of table `t` which ids come next (they start reading them).
  void advise(size_t table, const torch::Tensor& ids);
  void flush();
  CacheStats cache_stats() const;
  void reset_cache_stats();

  /// This rank's shards (weights and optimizer state) as tensors and the metadata that places them.
  void collect(checkpoint::NamedTensors& tensors, std::map<std::string, std::string>& metadata);
  /// Loads this rank's shards from the files of a checkpoint's embeddings directory (any world size
  /// and plan); throws naming the table when the files do not cover its shards.
  void load(const std::vector<std::shared_ptr<checkpoint::SafetensorsFile>>& files);

  const std::vector<TablePlan>& plan() const { return plan_; }
  const ShardedEmbeddingOptions& options() const { return options_; }

 private:
  struct LocalShard {
    size_t table;
    size_t index;  // in the table's plan
    Shard shard;
    std::unique_ptr<EmbeddingStore> store;
    torch::Tensor pooled;                  // the last training forward's output (with its graph)
    std::vector<int64_t> bags_per_sender;  // the last forward's bags, per sending rank
  };
  int world() const;
  int rank() const;
  /// Sends send[r] (1-D, one dtype) to each rank r; returns what each rank sent here.
  std::vector<torch::Tensor> exchange(const std::vector<torch::Tensor>& send) const;

  ShardedEmbeddingOptions options_;
  const dist::Group* group_;
  std::vector<TablePlan> plan_;
  std::vector<LocalShard> local_;                    // in (table, shard) order
  std::vector<std::vector<size_t>> owned_by_;        // rank -> indices into the flat shard list
  std::vector<std::pair<size_t, size_t>> all_shards_;  // flat list of (table, shard index)
  // The last training forward, for step().
  std::vector<torch::Tensor> outputs_, bag_lengths_;
};

}  // namespace colossal::recsys
