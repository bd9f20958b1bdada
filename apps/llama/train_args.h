#pragma once
// train_llama's settings: command-line flags in Colossal-LLaMA's style, or the same names as
// keys of a YAML/JSON file (--config); flags given on the command line win over the file.
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/auto_layout.h"
#include "core/booster/plugin_config.h"

namespace colossal::llama_app {

struct TrainArgs {
  // Model and data
  std::string pretrained;       // Hugging Face directory to start from (config, weights, tokenizer)
  std::string model_config;     // config.json for a model trained from scratch (default: a small one)
  std::string load_checkpoint = "auto";  // a checkpoint (root or step directory), auto or none
  std::vector<std::string> dataset;  // JSONL; empty: the built-in corpus
  std::string eval_dataset;          // JSONL; empty: the built-in held-out split (if built in)
  std::string tokenizer;             // tokenizer.model; empty: from --pretrained, else train one
  int64_t vocab_size = 4000;         // of a trained tokenizer
  std::string mode = "pretrain";     // pretrain | sft
  std::string on_bad_line = "stop";  // stop | skip
  std::string output = "out/llama";  // data cache, tokenizer, final model (OUTPUT/model)
  // The plugin, layout, precision, device and plugin options (--plugin help lists them all)
  booster::PluginConfig plugin;
  bool grad_checkpoint = false;
  // Optimisation
  int64_t batch_size = 8;  // samples per rank per micro-batch
  int64_t accumulation_steps = 1;
  int64_t max_length = 128;
  double lr = 3e-3, weight_decay = 0.1, grad_clip = 1.0;
  int64_t warmup_steps = 20;
  int64_t num_epochs = 1;
  int64_t max_steps = 300;  // > 0 overrides num_epochs
  uint64_t seed = 42;
  // Saving, evaluation, logging
  std::string save_dir;      // checkpoints; empty: OUTPUT/checkpoints
  int64_t save_interval = 0;  // steps; 0: only at the end
  int64_t eval_interval = 100;
  int64_t log_interval = 10;
  std::string log_file;
  std::string memory_trace;  // trace one step's memory by phase and module into this JSON file
  colossal::apps::AutoLayoutFlags auto_layout;  // --plugin auto's trials, budget and report
  int64_t keep_checkpoints = 2;
  // After training
  std::string prompt = "It is a truth universally acknowledged";
  int64_t sample_tokens = 40;

  std::string config;  // the file these came from, if any

  void validate() const;
};

/// Parses argv (and the --config file it names); returns false when the program should exit
/// with `exit_code` (help printed, or a usage error reported).
bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::llama_app
