#include "apps/llama/train_args.h"

#include <CLI/CLI.hpp>

#include "core/common/check.h"
#include "apps/common/plugin_flags.h"
#include "core/common/config.h"

namespace colossal::llama_app {

void TrainArgs::validate() const {
  auto_layout.validate();
  COLOSSAL_CHECK(batch_size >= 1, "--batch_size: expected >= 1, got ", batch_size);
  COLOSSAL_CHECK(accumulation_steps >= 1, "--accumulation_steps: expected >= 1, got ", accumulation_steps);
  COLOSSAL_CHECK(max_length >= 2, "--max_length: expected >= 2, got ", max_length);
  COLOSSAL_CHECK(lr > 0, "--lr: expected > 0, got ", lr);
  COLOSSAL_CHECK(weight_decay >= 0, "--weight_decay: expected >= 0, got ", weight_decay);
  COLOSSAL_CHECK(grad_clip >= 0, "--grad_clip: expected >= 0 (0: off), got ", grad_clip);
  COLOSSAL_CHECK(warmup_steps >= 0, "--warmup_steps: expected >= 0, got ", warmup_steps);
  COLOSSAL_CHECK(max_steps > 0 || num_epochs >= 1, "--num_epochs: expected >= 1 when --max_steps is 0, got ",
                 num_epochs);
  COLOSSAL_CHECK(mode == "pretrain" || mode == "sft", "--mode: expected pretrain or sft, got '", mode, "'");
  COLOSSAL_CHECK(on_bad_line == "stop" || on_bad_line == "skip", "--on_bad_line: expected stop or skip, got '",
                 on_bad_line, "'");
  COLOSSAL_CHECK(pretrained.empty() || model_config.empty(),
                 "--pretrained and --model_config both given: the model's shape comes from one of them");
  COLOSSAL_CHECK(eval_interval >= 0, "--eval_interval: expected >= 0 (0: only at the end), got ", eval_interval);
  COLOSSAL_CHECK(save_interval >= 0, "--save_interval: expected >= 0 (0: only at the end), got ", save_interval);
  COLOSSAL_CHECK(log_interval >= 1, "--log_interval: expected >= 1, got ", log_interval);
  COLOSSAL_CHECK(max_steps >= 0, "--max_steps: expected >= 0 (0: --num_epochs decides), got ", max_steps);
  COLOSSAL_CHECK(keep_checkpoints >= 0, "--keep_checkpoints: expected >= 0 (0: keep all), got ", keep_checkpoints);
  COLOSSAL_CHECK(vocab_size >= 260, "--vocab_size: expected >= 260 (256 byte pieces, unk, bos, eos and text), got ",
                 vocab_size);
  COLOSSAL_CHECK(sample_tokens >= 0, "--sample_tokens: expected >= 0 (0: none), got ", sample_tokens);
}

namespace {

// Every setting by name, for the config file (the names of the flags without "--").
void read_config_file(const std::string& path, TrainArgs& a) {
  auto c = ConfigNode::load_file(path);
  c.read("pretrained", a.pretrained);
  c.read("model_config", a.model_config);
  c.read("load_checkpoint", a.load_checkpoint);
  if (c.has("dataset")) {
    // A single file or a list.
    try {
      c.read("dataset", a.dataset);
    } catch (const std::exception&) {
      std::string one;
      c.read("dataset", one);
      a.dataset = {one};
    }
  }
  c.read("eval_dataset", a.eval_dataset);
  c.read("tokenizer", a.tokenizer);
  c.read("vocab_size", a.vocab_size);
  c.read("mode", a.mode);
  c.read("on_bad_line", a.on_bad_line);
  c.read("output", a.output);
  c.read("grad_checkpoint", a.grad_checkpoint);
  c.read("batch_size", a.batch_size);
  c.read("accumulation_steps", a.accumulation_steps);
  c.read("max_length", a.max_length);
  c.read("lr", a.lr);
  c.read("weight_decay", a.weight_decay);
  c.read("grad_clip", a.grad_clip);
  c.read("warmup_steps", a.warmup_steps);
  c.read("num_epochs", a.num_epochs);
  c.read("max_steps", a.max_steps);
  c.read("seed", a.seed);
  c.read("save_dir", a.save_dir);
  c.read("save_interval", a.save_interval);
  c.read("eval_interval", a.eval_interval);
  c.read("log_interval", a.log_interval);
  c.read("log_file", a.log_file);
  c.read("memory_trace", a.memory_trace);
  a.auto_layout.read(c);
  c.read("keep_checkpoints", a.keep_checkpoints);
  c.read("prompt", a.prompt);
  c.read("sample_tokens", a.sample_tokens);
  // Every other key is the plugin's (layout, precision, device, plugin options): make_plugin
  // rejects one that no plugin setting has, naming it and the file.
  a.plugin.read(c);
  c.check_all_keys_used();
}

}  // namespace

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  a.config = apps::config_argument(argc, argv);  // the file first: flags override it
  if (!a.config.empty()) read_config_file(a.config, a);

  CLI::App app{"Train a LLaMA-style model (default: a small one on Jane Austen's novels, then generate from it)"};
  app.add_option("--config", a.config, "YAML or JSON file with any of these settings (flags override it)");
  app.add_option("--pretrained", a.pretrained, "Hugging Face model directory to start from");
  app.add_option("--model_config", a.model_config, "config.json of a model to train from scratch");
  app.add_option("--load_checkpoint", a.load_checkpoint,
                 "checkpoint to resume (root or step directory); auto: the newest in the save directory, if any "
                 "(a restarted job continues); none: start over")
      ->capture_default_str();
  app.add_option("--dataset,--data", a.dataset, "JSONL training files (default: the built-in corpus)");
  app.add_option("--eval_dataset", a.eval_dataset, "JSONL evaluation file");
  app.add_option("--tokenizer", a.tokenizer, "SentencePiece tokenizer.model");
  app.add_option("--vocab_size", a.vocab_size, "vocabulary of a tokenizer trained here")->capture_default_str();
  app.add_option("--mode", a.mode, "pretrain | sft")->capture_default_str();
  app.add_option("--on_bad_line", a.on_bad_line, "stop | skip a malformed JSONL line")->capture_default_str();
  app.add_option("--output", a.output, "data cache, tokenizer and the final model (OUTPUT/model)")
      ->capture_default_str();
  apps::PluginFlags plugin_flags;
  plugin_flags.add_to(app, a.plugin.name);
  app.add_flag("--grad_checkpoint", a.grad_checkpoint, "recompute each decoder layer in backward");
  app.add_option("--batch_size", a.batch_size, "samples per rank per micro-batch")->capture_default_str();
  app.add_option("--accumulation_steps", a.accumulation_steps, "micro-batches per optimizer step")
      ->capture_default_str();
  app.add_option("--max_length", a.max_length, "tokens per sample")->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--weight_decay", a.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--grad_clip", a.grad_clip, "global gradient-norm clip (0: off)")->capture_default_str();
  app.add_option("--warmup_steps", a.warmup_steps, "linear warm-up steps before the cosine decay")
      ->capture_default_str();
  app.add_option("--num_epochs", a.num_epochs, "epochs (when --max_steps is 0)")->capture_default_str();
  app.add_option("--max_steps", a.max_steps, "optimizer steps (0: use --num_epochs)")->capture_default_str();
  app.add_option("--seed", a.seed, "random seed (weights, data order)")->capture_default_str();
  app.add_option("--save_dir", a.save_dir, "checkpoint directory (default OUTPUT/checkpoints)");
  app.add_option("--save_interval", a.save_interval, "steps between checkpoints (0: at the end only)")
      ->capture_default_str();
  app.add_option("--keep_checkpoints", a.keep_checkpoints, "checkpoints kept (0: all)")->capture_default_str();
  app.add_option("--eval_interval", a.eval_interval, "steps between evaluations (0: at the end only)")
      ->capture_default_str();
  app.add_option("--log_interval", a.log_interval, "steps between progress updates")->capture_default_str();
  app.add_option("--log_file", a.log_file, "append metrics as JSON lines");
  a.auto_layout.add_to(app, "OUTPUT/auto_layout.json");
  app.add_option("--memory_trace", a.memory_trace,
                 "trace the second step's memory (phases, modules: peak and kept bytes) into this JSON file");
  app.add_option("--prompt", a.prompt, "text to continue after training")->capture_default_str();
  app.add_option("--sample_tokens", a.sample_tokens, "tokens to generate after training (0: none)")
      ->capture_default_str();
  if (!apps::parse_job_flags(app, argc, argv, plugin_flags, a.plugin, exit_code)) return false;
  a.validate();
  return true;
}

}  // namespace colossal::llama_app
