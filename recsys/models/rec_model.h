#pragma once
// The recommenders: a model scores a batch (logits, one per sample; the click probability is
// their sigmoid). DLRM (Naumov et al. 2019): bottom MLP over the dense features, one pooled
// embedding per sparse field, every pairwise dot product among them, top MLP. DeepFM (Guo et
// al. 2017): a factorisation machine (first-order weights, second-order field interactions)
// beside a deep MLP over the same embeddings.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "recsys/data/ctr_data.h"
#include "recsys/embedding/cached_embedding.h"
#include "recsys/embedding/sharded_embedding.h"

namespace colossal::recsys {

struct RecModelOptions {
  std::string kind = "dlrm";            // dlrm | deepfm
  int64_t dense_features = 13;
  std::vector<int64_t> table_sizes;     // one per sparse field
  int64_t embedding_dim = 16;
  std::vector<int64_t> bottom_mlp = {64};   // DLRM: then a layer to embedding_dim
  std::vector<int64_t> top_mlp = {64, 32};  // DLRM's top, DeepFM's deep part; then a layer to 1
  std::string pooling = "sum";          // sum | mean: how a bag's embeddings combine
  /// > 0: every table is a CachedEmbeddingBag with this cache share, updated by its own sparse
  /// optimizer (cache.optimizer) instead of the model's; 0: plain embedding bags.
  double cache_ratio = 0;
  CachedEmbeddingOptions cache;  // eviction, optimizer, offload_dir (rows, dim, pooling, ratio set per table)
  /// none: every rank holds every table; auto | table | row | column: the tables are sharded over
  /// `group`'s ranks (sharded_embedding.h), updated by cache.optimizer, cached when cache_ratio > 0.
  std::string sharding = "none";
  const dist::Group* group = nullptr;
  double memory_per_rank = 0;  // sharding: bytes of tables a rank may hold (0: no limit)
  void validate() const;
};

/// One embedding bag per sparse field, in one of three layouts:
///  - plain: LibTorch's EmbeddingBag ("tables.<i>.weight"), updated by the model's optimizer;
///  - cached (cache_ratio > 0): a CachedEmbeddingBag each, whose table and optimizer state are
///    buffers under the same names ("tables.<i>.weight", "tables.<i>.state"), so checkpoints hold
///    them, updated by sparse_step();
///  - sharded (sharding != none): the tables spread over the group's ranks (ShardedEmbeddings);
///    they are not parameters or buffers of the module: each rank checkpoints its own shards
///    (save_shards / load_shards), and sparse_step() updates them.
class EmbeddingTablesImpl : public torch::nn::Module {
 public:
  /// `name` ("embeddings") names a sharded set in checkpoints and messages.
  EmbeddingTablesImpl(const std::string& name, int64_t dim, const RecModelOptions& options);
  std::vector<torch::Tensor> forward(const CtrBatch& batch);
  bool cached() const { return !cached_tables.empty(); }
  /// Cached tables: the touched rows' gradients averaged over `group`'s ranks (every rank then
  /// applies the same updates to the same rows, so the replicas stay equal), then applied.
  /// Sharded tables: their step (collective over the sharding group).
  void sparse_step(const dist::Group* group);
  /// Updated by sparse_step() rather than by the model's optimizer.
  bool sparse() const { return cached() || sharded != nullptr; }
  /// Cached tables: every cached row written back (before a checkpoint or reading the buffers).
  void flush();
  /// Cached tables: the cache forgotten without writing back (after the buffers were loaded).
  void invalidate();
  /// The ids of the next batch: tables on the offload disk start reading their rows.
  void advise(const CtrBatch& next);
  /// Seeds the caches with each field's id counts (counts[field][id]).
  void warm_up(const std::vector<std::vector<int64_t>>& counts);
  CacheStats cache_stats() const;
  void reset_cache_stats();

  std::vector<torch::nn::EmbeddingBag> tables;
  std::vector<std::shared_ptr<CachedEmbeddingBag>> cached_tables;
  std::shared_ptr<ShardedEmbeddings> sharded;
};
TORCH_MODULE(EmbeddingTables);

class RecModel : public torch::nn::Module {
 public:
  explicit RecModel(const std::string& name) : torch::nn::Module(name) {}
  /// Logits [B].
  virtual torch::Tensor forward(const CtrBatch& batch) = 0;
  /// The model's embedding tables (DeepFM has two sets: vectors and first-order weights).
  virtual std::vector<EmbeddingTables> embedding_tables() = 0;
};

std::shared_ptr<RecModel> make_rec_model(const RecModelOptions& options);

/// Linear layers with ReLU between them: in -> widths... (no activation after the last).
torch::nn::Sequential mlp(int64_t in, const std::vector<int64_t>& widths);

}  // namespace colossal::recsys
