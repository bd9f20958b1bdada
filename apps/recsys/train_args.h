#pragma once
// train_recsys's settings: flags, or the same names as keys of a YAML/JSON file (--config);
// flags given on the command line win over the file.
#include <cstdint>
#include <string>
#include <vector>

#include "core/booster/plugin_config.h"

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
  std::string sparse_optimizer = "adagrad";  // adagrad | adamw (the cached tables' optimizer)
  double sparse_lr = 0.05;
  int64_t cache_min_slots = 4096;          // tables up to this many rows are cached whole
  std::string offload_dir;  // cached tables: the tables (and their state) in memory-mapped files here
  // none: every rank holds every table; auto | table | row | column: the tables are sharded over
  // the data-parallel ranks (recsys/embedding/sharding_plan.h) and trained by the sparse optimizer
  std::string sharding = "none";
  double embedding_memory_gib = 0;  // sharding: table memory a rank may use (0: the available memory's share)
  // The plugin, layout, precision, device and plugin options (--plugin help lists them all)
  booster::PluginConfig plugin;
  // Optimisation
  int64_t batch_size = 512;  // samples per step over all ranks
  // MovieLens, DLRM, 2 ranks: held-out AUC peaks after the first epoch (0.79) and the ID
  // embeddings overfit after it (4 epochs at lr 2e-3 end at 0.69); lr 1e-3 with decoupled weight
  // decay 1 holds the second epoch at about 0.78.
  int64_t epochs = 2;
  int64_t max_steps = 0;  // > 0: stop after this many steps
  double lr = 1e-3, weight_decay = 1.0;
  uint64_t seed = 42;
  // Output
  std::string save_dir = "out/recsys";
  std::string load_checkpoint = "auto";
  int64_t save_interval = 0;  // steps between checkpoints besides each epoch's end (0: none)
  int64_t log_interval = 20;
  std::string log_file;  // default SAVE_DIR/log.jsonl (colossal plot draws it)
  int64_t keep_checkpoints = 2;
  std::string config;
  void validate() const;
};

bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::recsys_app
