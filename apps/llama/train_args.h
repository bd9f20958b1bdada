#pragma once
// train_llama's settings, each declared once in visit() under Colossal-LLaMA's names: the flags,
// the keys of a YAML/JSON file (--config; flags given on the command line win), --help and the
// range checks all come from that list (apps/common/settings.h).
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/auto_layout.h"
#include "apps/common/train_loop.h"
#include "core/booster/plugin_config.h"
#include "core/peft/lora.h"
#include "core/posttrain/grpo_loss.h"
#include "core/posttrain/preference_loss.h"
#include "core/common/options.h"

namespace colossal::llama_app {

struct TrainArgs {
  // Model and data
  std::string pretrained;       // Hugging Face directory to start from (config, weights, tokenizer)
  std::string model_config;     // config.json for a model trained from scratch (default: a small one)
  std::vector<std::string> dataset;  // JSONL; empty: the built-in corpus
  std::string eval_dataset;          // JSONL; empty: the built-in held-out split (if built in)
  std::string tokenizer;             // tokenizer.model; empty: from --pretrained, else train one
  int64_t vocab_size = 4000;         // of a trained tokenizer
  std::string mode = "pretrain";     // pretrain | sft | dpo | rm | grpo
  std::string on_bad_line = "stop";  // stop | skip
  std::string chat_template = "auto";  // sft: the tokenizer's own (auto) or LLaMA-2's
  bool packing = false;              // sft: several conversations per sample, each attending to itself
  double neftune_noise_alpha = 0;    // sft: NEFTune's embedding noise (0: off)
  std::string output = "out/llama";  // data cache, tokenizer, final model (OUTPUT/model)
  bool grad_checkpoint = false;
  // Optimisation
  int64_t batch_size = 8;  // samples per rank per micro-batch
  int64_t max_length = 128;
  double lr = 0, weight_decay = 0.1;  // lr 0: the mode's default (3e-3; rm and grpo 3e-4)
  int64_t warmup_steps = 20;
  int64_t num_epochs = 1;
  std::string save_dir;  // checkpoints; empty: OUTPUT/checkpoints
  // After training
  std::string prompt = "It is a truth universally acknowledged";
  int64_t sample_tokens = 40;
  // The loop's settings (steps, clipping, checkpoints, logs; apps/common/train_loop.h)
  apps::TrainLoopOptions loop{.max_steps = 300, .grad_clip = 1.0, .eval_interval = 100};
  apps::AutoLayoutFlags auto_layout;  // --plugin auto's trials, budget and report
  // LoRA (--lora_rank > 0): adapters trained, the base frozen (core/peft/lora.h)
  peft::LoraConfig lora{.rank = 0};
  // --mode dpo: the preference loss (core/posttrain/preference_loss.h; TRL's names)
  posttrain::PreferenceLossOptions preference;
  double center_rewards_coefficient = 0;  // --mode rm: TRL's penalty on the rewards' mean square
  // --mode grpo: sampling and the clipped objective (core/posttrain/grpo_loss.h; TRL's names)
  posttrain::GrpoOptions grpo;
  std::string reward = "exact_match";  // --mode grpo's built-in reward: exact_match | partial_match
  int64_t grpo_warmup_steps = 1000;  // built-in run without --pretrained: SFT steps first (OUTPUT/sft)
  bool merge_lora = false;  // also write OUTPUT/model with the adapters folded in
  std::string lora_adapter; // a PEFT adapter directory to continue training (its config replaces the --lora_* flags)
  // The plugin, layout, precision, device and plugin options (--plugin help lists them all)
  booster::PluginConfig plugin;
  std::string config;  // the file these came from, if any

  template <class V>
  void visit(V& v) {
    v("pretrained", pretrained, "Hugging Face model directory to start from");
    v("model_config", model_config, "config.json of a model to train from scratch");
    v("dataset", dataset, "JSONL training files (default: the built-in corpus)", alias("data"));
    v("eval_dataset", eval_dataset, "JSONL evaluation file");
    v("tokenizer", tokenizer, "tokenizer: a directory (tokenizer.json, else tokenizer.model) or either file");
    v("vocab_size", vocab_size, "vocabulary of a tokenizer trained here (256 byte pieces, unk, bos, eos and text)",
      at_least(260));
    v("mode", mode, "pretrain | sft | dpo (preference pairs: DPO, IPO, SimPO or ORPO by --loss_type) | rm (a reward "
      "model on preference pairs) | grpo (reinforcement learning from a reward on sampled completions)",
      one_of({"pretrain", "sft", "dpo", "rm", "grpo"}));
    v("on_bad_line", on_bad_line, "stop | skip a malformed JSONL line", one_of({"stop", "skip"}));
    v("chat_template", chat_template, "sft: auto (the tokenizer's own chat template; LLaMA-2's without one) | llama2",
      one_of({"auto", "llama2"}));
    v("packing", packing, "sft: pack several conversations into each sample (best fit decreasing), each attending "
      "only to itself with its own positions");
    v("neftune_noise_alpha", neftune_noise_alpha, "sft: NEFTune, uniform noise of this alpha on the embeddings in "
      "training (5 is the paper's; 0: off)", at_least(0));
    v("output", output, "data cache, tokenizer and the final model (OUTPUT/model)");
    v("grad_checkpoint", grad_checkpoint, "recompute each decoder layer in backward");
    v("batch_size", batch_size, "samples per rank per micro-batch", at_least(1));
    v("max_length", max_length, "tokens per sample", between(2, 1 << 20));
    v("lr", lr, "peak learning rate (0: the mode's: 3e-3; rm and grpo 3e-4)", at_least(0));
    v("weight_decay", weight_decay, "AdamW weight decay", at_least(0));
    v("warmup_steps", warmup_steps, "linear warm-up steps before the cosine decay", at_least(0));
    v("num_epochs", num_epochs, "epochs (when --max_steps is 0)", at_least(1));
    v("save_dir", save_dir, "checkpoint directory (default OUTPUT/checkpoints)");
    v("prompt", prompt, "text to continue after training");
    v("sample_tokens", sample_tokens, "tokens to generate after training (0: none)", at_least(0));
    loop.visit(v);
    auto_layout.visit(v);
    lora.visit(v);
    preference.visit(v);
    v("center_rewards_coefficient", center_rewards_coefficient,
      "rm: adds this times the mean of (r_chosen + r_rejected)^2, keeping rewards centred (TRL's; 0: off)",
      at_least(0));
    grpo.visit(v);
    v("reward", reward, "grpo: the built-in reward against each prompt's answer: exact_match (1 or 0) | "
      "partial_match (the share of characters in place)", one_of({"exact_match", "partial_match"}));
    v("grpo_warmup_steps", grpo_warmup_steps, "grpo without --pretrained or --dataset: SFT steps on the built-in "
      "conversations first (in OUTPUT/sft), so the small model sometimes answers right", at_least(0));
    v("merge_lora", merge_lora, "with --lora_rank: also write OUTPUT/model with the adapters folded into the weights");
    v("lora_adapter", lora_adapter, "continue training this PEFT LoRA adapter (its adapter_config.json replaces the "
      "--lora_* settings)");
  }
  void validate() const;
};

/// Parses argv (and the --config file it names); returns false when the program should exit
/// with `exit_code` (help printed, or a usage error reported).
bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::llama_app
