#include "apps/recsys/train_args.h"

#include <CLI/CLI.hpp>

#include "apps/common/plugin_flags.h"
#include "core/common/check.h"
#include "core/common/config.h"

namespace colossal::recsys_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(data == "movielens" || data == "synthetic", "--data: expected movielens or synthetic, got '", data, "'");
  COLOSSAL_CHECK(held_out_fraction > 0 && held_out_fraction < 1, "--held_out_fraction: expected in (0, 1), got ",
                 held_out_fraction);
  COLOSSAL_CHECK(synthetic_samples >= 2 && synthetic_table_size >= 1 && synthetic_fields >= 1,
                 "--synthetic_samples, --synthetic_table_size, --synthetic_fields: expected >= 2, >= 1, >= 1");
  COLOSSAL_CHECK(model == "dlrm" || model == "deepfm", "--model: expected dlrm or deepfm, got '", model, "'");
  COLOSSAL_CHECK(pooling == "sum" || pooling == "mean", "--pooling: expected sum or mean, got '", pooling, "'");
  COLOSSAL_CHECK(cache_ratio >= 0 && cache_ratio <= 1, "--cache_ratio: expected in [0, 1] (0: off), got ", cache_ratio);
  COLOSSAL_CHECK(eviction == "lfu" || eviction == "lru", "--eviction: expected lfu or lru, got '", eviction, "'");
  COLOSSAL_CHECK(sparse_optimizer == "adagrad" || sparse_optimizer == "rowwise_adagrad" || sparse_optimizer == "adamw",
                 "--sparse_optimizer: expected adagrad, rowwise_adagrad or adamw, got '", sparse_optimizer, "'");
  COLOSSAL_CHECK(sharding == "none" || sharding == "auto" || sharding == "table" || sharding == "row" ||
                     sharding == "column",
                 "--sharding: expected none, auto, table, row or column, got '", sharding, "'");
  COLOSSAL_CHECK(embedding_memory_gib >= 0, "--embedding_memory_gib: expected >= 0 (0: automatic), got ",
                 embedding_memory_gib);
  COLOSSAL_CHECK(offload_dir.empty() || cache_ratio > 0 || sharding != "none", "--offload_dir holds cached or "
                 "sharded tables: add --cache_ratio or --sharding");
  COLOSSAL_CHECK(cache_min_slots >= 0, "--cache_min_slots: expected >= 0, got ", cache_min_slots);
  COLOSSAL_CHECK(sparse_lr > 0, "--sparse_lr: expected > 0, got ", sparse_lr);
  COLOSSAL_CHECK(embedding_dim >= 1, "--embedding_dim: expected >= 1, got ", embedding_dim);
  COLOSSAL_CHECK(batch_size >= 1, "--batch_size: expected >= 1, got ", batch_size);
  COLOSSAL_CHECK(epochs >= 1 || max_steps > 0, "--epochs: expected >= 1, got ", epochs);
  COLOSSAL_CHECK(max_steps >= 0, "--max_steps: expected >= 0, got ", max_steps);
  COLOSSAL_CHECK(lr > 0, "--lr: expected > 0, got ", lr);
  COLOSSAL_CHECK(weight_decay >= 0, "--weight_decay: expected >= 0, got ", weight_decay);
  COLOSSAL_CHECK(save_interval >= 0, "--save_interval: expected >= 0 (0: none), got ", save_interval);
  COLOSSAL_CHECK(log_interval >= 1, "--log_interval: expected >= 1, got ", log_interval);
  COLOSSAL_CHECK(keep_checkpoints >= 0, "--keep_checkpoints: expected >= 0 (0: keep all), got ", keep_checkpoints);
}

namespace {

void read_config_file(const std::string& path, TrainArgs& a) {
  auto c = ConfigNode::load_file(path);
  c.read("data", a.data);
  c.read("r_data", a.r_data);
  c.read("held_out_fraction", a.held_out_fraction);
  c.read("synthetic_samples", a.synthetic_samples);
  c.read("synthetic_table_size", a.synthetic_table_size);
  c.read("synthetic_fields", a.synthetic_fields);
  c.read("synthetic_zipf", a.synthetic_zipf);
  c.read("model", a.model);
  c.read("embedding_dim", a.embedding_dim);
  c.read("pooling", a.pooling);
  c.read("cache_ratio", a.cache_ratio);
  c.read("eviction", a.eviction);
  c.read("sparse_optimizer", a.sparse_optimizer);
  c.read("sparse_lr", a.sparse_lr);
  c.read("cache_min_slots", a.cache_min_slots);
  c.read("offload_dir", a.offload_dir);
  c.read("sharding", a.sharding);
  c.read("embedding_memory_gib", a.embedding_memory_gib);
  c.read("batch_size", a.batch_size);
  c.read("epochs", a.epochs);
  c.read("max_steps", a.max_steps);
  c.read("lr", a.lr);
  c.read("weight_decay", a.weight_decay);
  c.read("seed", a.seed);
  c.read("save_dir", a.save_dir);
  c.read("load_checkpoint", a.load_checkpoint);
  c.read("save_interval", a.save_interval);
  c.read("log_interval", a.log_interval);
  c.read("log_file", a.log_file);
  c.read("keep_checkpoints", a.keep_checkpoints);
  // The plugin's settings ("plugin", "precision", "tp", ... and its options): a key no setting
  // has is an error naming it and the file.
  a.plugin.read(c);
  c.check_all_keys_used();
}

}  // namespace

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  a.config = apps::config_argument(argc, argv);  // the file first: flags override it
  if (!a.config.empty()) read_config_file(a.config, a);

  CLI::App app{"Train a recommender (default: DLRM on MovieLens ratings as clicks, split by time)"};
  app.add_option("--config", a.config, "YAML or JSON file with any of these settings (flags override it)");
  app.add_option("--data", a.data, "movielens | synthetic (Criteo-shaped, power-law ids)")->capture_default_str();
  app.add_option("--r_data", a.r_data, "movielens: dslabs' data/Rdata (.rdx/.rdb; default: setup's copy)");
  app.add_option("--held_out_fraction", a.held_out_fraction, "held-out share (movielens: the latest ratings)")
      ->capture_default_str();
  app.add_option("--synthetic_samples", a.synthetic_samples, "synthetic: samples")->capture_default_str();
  app.add_option("--synthetic_table_size", a.synthetic_table_size, "synthetic: rows per table")->capture_default_str();
  app.add_option("--synthetic_fields", a.synthetic_fields, "synthetic: sparse fields")->capture_default_str();
  app.add_option("--synthetic_zipf", a.synthetic_zipf, "synthetic: id popularity exponent")->capture_default_str();
  app.add_option("--model", a.model, "dlrm | deepfm")->capture_default_str();
  app.add_option("--embedding_dim", a.embedding_dim, "embedding width")->capture_default_str();
  app.add_option("--pooling", a.pooling, "sum | mean: how a bag's embeddings combine")->capture_default_str();
  app.add_option("--bottom_mlp", a.bottom_mlp, "DLRM's bottom MLP widths (then embedding_dim)")->capture_default_str();
  app.add_option("--top_mlp", a.top_mlp, "DLRM's top / DeepFM's deep MLP widths (then 1)")->capture_default_str();
  app.add_option("--cache_ratio", a.cache_ratio,
                 "cached embedding tables: share of each table's rows in the cache (0: plain tables)")
      ->capture_default_str();
  app.add_option("--eviction", a.eviction, "cached tables: lfu | lru")->capture_default_str();
  app.add_option("--sparse_optimizer", a.sparse_optimizer,
                 "cached or sharded tables' row-wise optimizer: adagrad | rowwise_adagrad | adamw")
      ->capture_default_str();
  app.add_option("--sparse_lr", a.sparse_lr, "cached or sharded tables' learning rate")->capture_default_str();
  app.add_option("--cache_min_slots", a.cache_min_slots, "cached tables: tables up to this many rows are cached whole")
      ->capture_default_str();
  app.add_option("--offload_dir", a.offload_dir,
                 "cached or sharded tables and their optimizer state in memory-mapped files in this directory "
                 "(tables larger than memory)");
  app.add_option("--sharding", a.sharding,
                 "none (every rank holds every table) | auto | table | row | column: shard the tables over the ranks")
      ->capture_default_str();
  app.add_option("--embedding_memory_gib", a.embedding_memory_gib,
                 "sharding: GiB of tables a rank may hold (0: the available memory's share)")->capture_default_str();
  apps::PluginFlags plugin_flags;
  plugin_flags.add_to(app, a.plugin.name);
  app.add_option("--batch_size", a.batch_size, "samples per step over all ranks")->capture_default_str();
  app.add_option("--epochs", a.epochs, "passes over the training samples")->capture_default_str();
  app.add_option("--max_steps", a.max_steps, "stop after this many steps (0: --epochs decides)")->capture_default_str();
  app.add_option("--lr", a.lr, "Adam learning rate")->capture_default_str();
  app.add_option("--weight_decay", a.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--seed", a.seed, "random seed (weights, order)")->capture_default_str();
  app.add_option("--save_dir", a.save_dir, "checkpoints/ and the log go here")->capture_default_str();
  app.add_option("--load_checkpoint", a.load_checkpoint,
                 "checkpoint to resume (root or step directory); auto: the newest in the save directory, if any; "
                 "none: start over")
      ->capture_default_str();
  app.add_option("--save_interval", a.save_interval, "steps between checkpoints besides each epoch's end (0: none)")
      ->capture_default_str();
  app.add_option("--log_interval", a.log_interval, "steps between progress updates")->capture_default_str();
  app.add_option("--log_file", a.log_file, "metrics as JSON lines (default SAVE_DIR/log.jsonl; colossal plot draws it)");
  app.add_option("--keep_checkpoints", a.keep_checkpoints, "checkpoints kept (0: all)")->capture_default_str();
  if (!apps::parse_job_flags(app, argc, argv, plugin_flags, a.plugin, exit_code)) return false;
  a.validate();
  return true;
}

}  // namespace colossal::recsys_app
