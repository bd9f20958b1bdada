#pragma once
// train_recsys's settings, each declared once in visit(): the flags, the keys of a YAML/JSON
// file (--config; flags given on the command line win), --help and the range checks all come
// from that list (apps/common/settings.h).
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/train_loop.h"
#include "core/booster/plugin_config.h"
#include "core/common/options.h"

namespace colossal::recsys_app {

struct TrainArgs {
  // Data
  std::string data = "movielens";  // movielens | synthetic
  std::string r_data;              // movielens: dslabs' data/Rdata (default: setup's copy)
  double held_out_fraction = 0.2;  // movielens: the latest ratings; synthetic: the last samples
  int64_t synthetic_samples = 200000, synthetic_table_size = 100000, synthetic_fields = 26;
  double synthetic_zipf = 1.05;
  // Model
  std::string model = "dlrm";  // dlrm | deepfm
  int64_t embedding_dim = 16;
  std::string pooling = "mean";  // sum | mean (a bag of genres averages)
  std::vector<int64_t> bottom_mlp = {64}, top_mlp = {64, 32};
  // Cached embedding tables (recsys/embedding/cached_embedding.h): > 0 keeps each table in host
  // memory with this share of its rows cached, updated by a sparse row-wise optimizer.
  double cache_ratio = 0;
  std::string eviction = "lfu";            // lfu | lru
  std::string sparse_optimizer = "adagrad";  // adagrad | rowwise_adagrad | adamw (the cached tables' optimizer)
  double sparse_lr = 0.05;
  int64_t cache_min_slots = 4096;          // tables up to this many rows are cached whole
  std::string offload_dir;  // cached tables: the tables (and their state) in memory-mapped files here
  // none: every rank holds every table; auto | table | row | column: the tables are sharded over
  // the data-parallel ranks (recsys/embedding/sharding_plan.h) and trained by the sparse optimizer
  std::string sharding = "none";
  double embedding_memory_gib = 0;  // sharding: table memory a rank may use (0: the available memory's share)
  // Optimisation
  int64_t batch_size = 512;  // samples per step over all ranks
  // MovieLens, DLRM, 2 ranks: held-out AUC peaks after the first epoch (0.79) and the ID
  // embeddings overfit after it (4 epochs at lr 2e-3 end at 0.69); lr 1e-3 with decoupled weight
  // decay 1 holds the second epoch at about 0.78.
  int64_t epochs = 2;
  double lr = 1e-3, weight_decay = 1.0;
  std::string save_dir = "out/recsys";  // checkpoints/ and log.jsonl
  // The loop's settings (steps, clipping, checkpoints, logs; apps/common/train_loop.h)
  apps::TrainLoopOptions loop{.log_interval = 20};
  // The plugin, layout, precision, device and plugin options (--plugin help lists them all)
  booster::PluginConfig plugin;
  std::string config;  // the --config file, if any

  template <class V>
  void visit(V& v) {
    v("data", data, "movielens | synthetic (Criteo-shaped, power-law ids)", one_of({"movielens", "synthetic"}));
    v("r_data", r_data, "movielens: dslabs' data/Rdata (.rdx/.rdb; default: setup's copy)");
    v("held_out_fraction", held_out_fraction, "held-out share (movielens: the latest ratings)", strictly_between(0, 1));
    // Bounded so a typo cannot sit for minutes generating data (200,000 x 26 ids take 0.1 s).
    v("synthetic_samples", synthetic_samples, "synthetic: samples", between(2, 1e8));
    v("synthetic_table_size", synthetic_table_size, "synthetic: rows per table", between(1, 1e9));
    v("synthetic_fields", synthetic_fields, "synthetic: sparse fields", between(1, 1024));
    v("synthetic_zipf", synthetic_zipf, "synthetic: id popularity exponent", above(0));
    v("model", model, "dlrm | deepfm", one_of({"dlrm", "deepfm"}));
    v("embedding_dim", embedding_dim, "embedding width", between(1, 4096));
    v("pooling", pooling, "sum | mean: how a bag's embeddings combine", one_of({"sum", "mean"}));
    v("bottom_mlp", bottom_mlp, "DLRM's bottom MLP widths (then embedding_dim)", between(1, 1 << 16));
    v("top_mlp", top_mlp, "DLRM's top / DeepFM's deep MLP widths (then 1)", between(1, 1 << 16));
    v("cache_ratio", cache_ratio, "cached embedding tables: share of each table's rows in the cache (0: plain tables)",
      between(0, 1));
    v("eviction", eviction, "cached tables: lfu | lru", one_of({"lfu", "lru"}));
    v("sparse_optimizer", sparse_optimizer, "cached or sharded tables' row-wise optimizer",
      one_of({"adagrad", "rowwise_adagrad", "adamw"}));
    v("sparse_lr", sparse_lr, "cached or sharded tables' learning rate", above(0));
    v("cache_min_slots", cache_min_slots, "cached tables: tables up to this many rows are cached whole", at_least(0));
    v("offload_dir", offload_dir,
      "cached or sharded tables and their optimizer state in memory-mapped files in this directory (tables larger "
      "than memory)");
    v("sharding", sharding, "none (every rank holds every table) | auto | table | row | column: shard the tables over "
      "the ranks", one_of({"none", "auto", "table", "row", "column"}));
    v("embedding_memory_gib", embedding_memory_gib, "sharding: GiB of tables a rank may hold (0: the available "
      "memory's share)", at_least(0));
    v("batch_size", batch_size, "samples per step over all ranks", at_least(1));
    v("epochs", epochs, "passes over the training samples (when --max_steps is 0)", at_least(1));
    v("lr", lr, "Adam learning rate", above(0));
    v("weight_decay", weight_decay, "AdamW weight decay", at_least(0));
    v("save_dir", save_dir, "checkpoints/ and the log (log.jsonl, unless --log_file) go here");
    loop.visit(v);
  }
  /// What involves two settings at once (each setting's own range is in its declaration).
  void validate() const;
};

bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::recsys_app
