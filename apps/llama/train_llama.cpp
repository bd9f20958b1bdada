// train_llama: train a LLaMA-style model on JSONL text, on one process or many, with any Booster
// plugin; checkpoints that resume exactly; a Hugging Face model directory at the end.
//
// With no arguments it trains a small LLaMA (about 5M parameters) on the built-in corpus (Jane
// Austen's novels, fetched by scripts/setup.sh), training a SentencePiece tokenizer first, for a
// few minutes, then writes out/llama/model (what infer_llama loads by default) and prints a
// sample:
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_llama
//   build/apps/train_llama --plugin zero2 --mixed_precision bf16 --max_steps 1000 --log_file m.jsonl
//   build/apps/train_llama --config train.yaml --load_checkpoint out/llama/checkpoints
//   colossal run --nproc_per_node 4 -- train_llama --plugin hybrid --tp 2 --sp 2 --sp_mode ring_attn
// Flags follow Colossal-LLaMA's names; see apps/llama/train_args.h or --help.
#include <sys/stat.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>

#include "apps/llama/train_llama.h"

#include "apps/common/auto_layout.h"
#include "apps/common/train_loop.h"
#include "apps/llama/grpo_task.h"
#include "apps/llama/preference_task.h"
#include "apps/llama/train_args.h"
#include "core/booster/booster.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "core/peft/lora.h"
#include "core/optim/lr_scheduler.h"
#include "core/parallel/expert/router_stats.h"
#include "llama/chat_tasks.h"
#include "llama/corpus.h"
#include "llama/dataset.h"
#include "llama/layout_trial.h"
#include "llama/parallelize.h"
#include "llama/pipeline.h"
#include "llama/pretrained.h"
#include "llama/shapes.h"
#include "llama/tokenizer.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::llama_app::GrpoTask;
using colossal::llama_app::PreferenceTask;
using colossal::llama_app::RewardFunction;
using colossal::llama_app::TrainArgs;
using namespace colossal::llama;

namespace {

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

double elapsed(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Rank 0 does `fn` (writing files the others then read); everyone waits for it.
template <typename Fn>
void on_rank0_then_all(Fn&& fn) {
  if (dist::rank() == 0) fn();
  dist::barrier(dist::world_group());
}

// Token-weighted mean loss over the whole evaluation set, split over the data-parallel replicas
// (the ranks of one replica run the same samples together). Every rank runs the same number of
// batches (ZeRO-3 gathers parameters collectively); ranks out of samples repeat sample 0 with
// weight 0. The world sum counts each replica's ranks alike, so the ratio is the mean.
// Under pipeline parallelism `pipeline` runs the samples of a batch (one microbatch each) through
// the stages and returns the sum of their token-weighted losses.
using PipelineEval = std::function<double(const std::vector<torch::Tensor>&, const std::vector<torch::Tensor>&)>;

// No value when no token was scored (every sample fully masked): there is no mean to report.
std::optional<double> evaluate(LlamaForCausalLM& model, const TokenDataset& data, int64_t batch_size,
                               std::pair<int, int> replica, const PipelineEval& pipeline) {
  torch::NoGradGuard no_grad;
  const auto [r, n] = replica;
  model->eval();
  const auto device = model->parameters().front().device();
  const int64_t per_rank = (data.size() + n - 1) / n;
  double loss_sum = 0, tokens = 0;
  for (int64_t start = 0; start < per_rank; start += batch_size) {
    std::vector<int64_t> idx;
    std::vector<double> weight;
    for (int64_t k = start; k < std::min(per_rank, start + batch_size); ++k) {
      int64_t i = k * n + r;
      idx.push_back(i < data.size() ? i : 0);
      weight.push_back(i < data.size() ? 1.0 : 0.0);
    }
    auto b = data.batch(idx);
    if (pipeline) {
      // Every replica runs every position, padding too (its labels masked, so it scores nothing):
      // under expert parallelism the replicas' forwards exchange tokens, so they must run the same
      // microbatches. A microbatch is one sample, or on a 2D/2.5D/3D grid as many as the grid
      // splits the batch into (the last filled up with masked copies of sample 0).
      const auto& context = model->parallel_context();
      const int64_t rows = context.grid_parallel() ? context.grid.stream().row_parts() : 1;
      auto all_labels = b.labels.clone();
      for (size_t k = 0; k < idx.size(); ++k)
        if (weight[k] == 0) all_labels[static_cast<int64_t>(k)].fill_(-100);
      tokens += all_labels.narrow(1, 1, all_labels.size(1) - 1).ne(-100).sum().item<double>();
      auto all_ids = b.input_ids;
      if (const int64_t pad = (rows - all_ids.size(0) % rows) % rows; pad > 0) {
        all_ids = torch::cat({all_ids, all_ids.narrow(0, 0, 1).expand({pad, all_ids.size(1)})});
        all_labels = torch::cat({all_labels, torch::full({pad, all_labels.size(1)}, -100, all_labels.options())});
      }
      std::vector<torch::Tensor> ids, labels;
      for (int64_t k = 0; k < all_ids.size(0); k += rows) {
        ids.push_back(all_ids.narrow(0, k, rows).to(device));
        labels.push_back(all_labels.narrow(0, k, rows).to(device));
      }
      loss_sum += pipeline(ids, labels);
      continue;
    }
    // The whole batch in one forward: the summed log-likelihood of its targets (padding rows none).
    // Every replica runs every batch, even one with nothing to score: under expert parallelism the
    // forwards exchange tokens.
    auto labels = b.labels.clone();
    for (size_t k = 0; k < idx.size(); ++k)
      if (weight[k] == 0) labels[static_cast<int64_t>(k)].fill_(-100);
    const double count = labels.narrow(1, 1, labels.size(1) - 1).ne(-100).sum().item<double>();
    auto logps = model->token_log_probs(b.input_ids.to(device), labels.to(device), b.position_ids);
    loss_sum -= model->sum_over_sequence(logps.to(torch::kFloat64)).sum().item<double>();
    tokens += count;
  }
  model->train();
  auto t = torch::tensor({loss_sum, tokens}, torch::kFloat64);
  dist::all_reduce(t, dist::world_group());
  if (t[1].item<double>() == 0) return std::nullopt;
  return t[0].item<double>() / t[1].item<double>();
}

// Greedy continuation of `prompt` (full recompute per token; the serving engine is infer_llama).
std::string generate(LlamaForCausalLM& model, const colossal::text::Tokenizer& tok, const std::string& prompt, int64_t n) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto ids = tok.encode(prompt, true);
  size_t prompt_len = ids.size();
  for (int64_t i = 0; i < n; ++i) {
    int64_t max_len = model->config().max_position_embeddings;
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - max_len);
    auto input = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kInt64).unsqueeze(0);
    int64_t next = model->forward(input)[0][-1].argmax().item<int64_t>();
    if (next == tok.eos_id()) break;
    ids.push_back(next);
  }
  return tok.decode(std::vector<int64_t>(ids.begin() + prompt_len, ids.end()));
}

// The small model the built-in run trains: ~5M parameters, a few minutes on two CPU cores.
LlamaConfig default_config(int64_t max_length) {
  LlamaConfig c;
  c.hidden_size = 256;
  c.intermediate_size = 688;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = max_length;
  return c;
}

// --plugin auto: the model's shape as this run will build it (the tokenizer's vocabulary when one
// is given; the size it will be trained to otherwise), then the search (apps/common/auto_layout.h).
// Sets the plugin, the per-replica batch, accumulation and checkpointing to the winner's.
void choose_layout_by_measurement(TrainArgs& a) {
  COLOSSAL_CHECK(a.pretrained.empty() || a.model_config.empty(), "--pretrained and --model_config: give one");
  LlamaConfig cfg = !a.pretrained.empty()     ? LlamaConfig::from_json_file(a.pretrained + "/config.json")
                    : !a.model_config.empty() ? LlamaConfig::from_json_file(a.model_config)
                                              : default_config(a.max_length);
  if (a.pretrained.empty()) cfg.vocab_size = a.tokenizer.empty() ? a.vocab_size : load_tokenizer(a.tokenizer)->vocab_size();
  const int world = dist::world_size();
  colossal::apps::AutoLayoutOptions o;
  o.global_batch = a.batch_size * a.loop.accumulation_steps * world;  // what --batch_size means under plain data parallelism
  o.sequence = a.max_length;
  o.precision = a.plugin.precision;
  o.trials = a.auto_layout.trials;
  o.budget_s = a.auto_layout.budget_s;
  o.report_path = a.auto_layout.report.empty() ? a.output + "/auto_layout.json" : a.auto_layout.report;
  colossal::fs::make_dirs(a.output);
  colossal::tools::TrialOptions trial;
  trial.sequence = a.max_length;
  trial.seed = a.loop.seed;
  const auto report = colossal::apps::choose_layout(
      model_spec(cfg), o, [&](const colossal::tools::Layout& l) { return layout_is_valid(cfg, l, world, a.max_length); },
      [&](const colossal::tools::Layout& l) { return time_training_steps(cfg, l, a.plugin, trial); },
      [&](const colossal::tools::MachineRates& rates, colossal::tools::SearchSpace& space) {
        calibrate_compute(cfg, a.batch_size * a.max_length, rates, space);
      });
  const auto& best = report.candidates[report.chosen].layout;
  a.plugin = colossal::apps::chosen_plugin_config(best, a.plugin);
  a.grad_checkpoint = best.activation_checkpointing;
  a.batch_size = best.pp > 1 ? best.replica_batch : best.micro_batch;
  a.loop.accumulation_steps = best.pp > 1 ? 1 : best.replica_batch / best.micro_batch;
}

void run(TrainArgs& a, colossal::apps::RunSummary& summary, const RewardFunction& reward = {}) {
  // The runtime; under colossal verify the one-process reference runs the layout's global batch.
  colossal::apps::TrainJob job(a.loop, a.plugin);
  const int r = dist::rank();
  // A reward model fine-tunes a whole network on one number per sequence: a tenth of the rate.
  // RL takes small steps: at 1e-3 the built-in GRPO run's reward fell from 0.2 to 0.03 in 30 steps.
  if (a.lr == 0) a.lr = a.mode == "rm" || a.mode == "grpo" ? 3e-4 : 3e-3;
  a.batch_size *= job.batch_factor();
  if (a.plugin.name == "auto") choose_layout_by_measurement(a);
  // The plugin first: its layout is checked against the world before anything else runs.
  auto plugin = booster::make_plugin(a.plugin);
  const auto& dims = plugin->dims();
  const c10::Device device = plugin->device();
  colossal::fs::make_dirs(a.output);
  if (a.save_dir.empty()) a.save_dir = a.output + "/checkpoints";
  job.lock_output(a.save_dir);  // before anything is written for this run

  // ---- data files: the built-in corpus unless --dataset is given (--mode dpo: pairs made from it)
  const bool preference = a.mode == "dpo" || a.mode == "rm";
  const bool grpo = a.mode == "grpo";
  std::vector<std::string> text_files = a.dataset;  // what a tokenizer trained here reads
  std::string corpus_train, corpus_eval;
  if (a.dataset.empty()) {
    std::string dir = a.output + "/data";
    on_rank0_then_all([&] {
      if (exists(dir + "/train.jsonl")) return;
      auto split = write_austen_jsonl(default_austen_rdb(), dir);
      std::printf("corpus: Jane Austen's novels, %ld training paragraphs (%.1f MB), %ld held out\n",
                  split.train_records, split.train_bytes / 1e6, split.valid_records);
    });
    corpus_train = dir + "/train.jsonl";
    corpus_eval = dir + "/valid.jsonl";
    text_files = {corpus_train};
    if (a.mode == "sft") {
      // Conversations with checkable answers (additions, reversed letters of words from the corpus); the
      // tokenizer still learns the corpus.
      on_rank0_then_all([&] {
        if (exists(dir + "/chat_train.jsonl")) return;
        const auto words = colossal::llama::words_of(corpus_train);
        write_chat_tasks(colossal::llama::make_chat_tasks(20000, 1, words), dir + "/chat_train.jsonl", true);
        write_chat_tasks(colossal::llama::make_chat_tasks(200, 2, words), dir + "/chat_valid.jsonl", true);
        std::printf("conversations: 20000 built-in tasks (additions, reversed letters), 200 held out\n");
      });
      a.dataset = {dir + "/chat_train.jsonl"};
      if (a.eval_dataset.empty()) a.eval_dataset = dir + "/chat_valid.jsonl";
    } else if (grpo) {
      // Reversals as prompts with answers, new draws, so nothing was seen in SFT: the task the warm
      // model answers right about half the time, so most groups carry a signal (it gets few
      // additions right in any sample; with them in the mix the reward did not rise in 300 steps).
      on_rank0_then_all([&] {
        if (exists(dir + "/grpo_train.jsonl")) return;
        const auto words = colossal::llama::words_of(corpus_train);
        write_chat_tasks(colossal::llama::make_reversal_tasks(2000, 3, words), dir + "/grpo_train.jsonl", false);
        write_chat_tasks(colossal::llama::make_reversal_tasks(200, 4, words), dir + "/grpo_valid.jsonl", false);
        std::printf("prompts: 2000 built-in reversals with answers, 200 held out\n");
      });
      a.dataset = {dir + "/grpo_train.jsonl"};
      if (a.eval_dataset.empty()) a.eval_dataset = dir + "/grpo_valid.jsonl";
      if (a.pretrained.empty() && a.grpo_warmup_steps > 0) {
        // A model from scratch never answers right, so no group has a signal: SFT on the built-in
        // conversations first (kept in OUTPUT/sft and reused), then GRPO from it.
        const std::string warm = a.output + "/sft";
        if (!exists(warm + "/model/config.json")) {
          TrainArgs w;
          w.mode = "sft";
          w.packing = true;
          w.output = warm;
          w.plugin = a.plugin;
          w.loop.seed = a.loop.seed;
          w.loop.max_steps = a.grpo_warmup_steps;
          w.loop.eval_interval = a.grpo_warmup_steps;
          w.sample_tokens = 0;
          if (r == 0) std::printf("grpo: %ld SFT warm-up steps first -> %s/model\n", a.grpo_warmup_steps, warm.c_str());
          colossal::apps::RunSummary warmup;
          run(w, warmup);
        }
        a.pretrained = warm + "/model";
      }
    } else if (!preference) {
      a.dataset = {corpus_train};
      if (a.eval_dataset.empty()) a.eval_dataset = corpus_eval;
    }
  }
  COLOSSAL_CHECK(!(preference || grpo) || a.dataset.empty() || !a.tokenizer.empty() || !a.pretrained.empty(),
                 "--mode ", a.mode, " with --dataset needs a tokenizer (--pretrained or --tokenizer): preference pairs are no "
                 "text to train one on");

  // ---- tokenizer: given, from the pretrained directory, or trained here on the training files
  if (a.tokenizer.empty() && !a.pretrained.empty()) {
    COLOSSAL_CHECK(has_tokenizer(a.pretrained), "--pretrained ", a.pretrained,
                   " has neither tokenizer.json nor tokenizer.model; pass --tokenizer FILE");
    a.tokenizer = a.pretrained;  // tokenizer.json first, as transformers chooses
  }
  if (a.tokenizer.empty()) {
    a.tokenizer = a.output + "/tokenizer.model";
    on_rank0_then_all([&] {
      if (exists(a.tokenizer)) return;
      auto t0 = std::chrono::steady_clock::now();
      TrainTokenizerOptions o;
      o.vocab_size = a.vocab_size;
      train_tokenizer(text_files, a.output + "/tokenizer", o);
      std::printf("tokenizer: trained %ld pieces in %.1f s -> %s\n", a.vocab_size, elapsed(t0), a.tokenizer.c_str());
    });
  }
  const std::shared_ptr<const colossal::text::Tokenizer> tokenizer = load_tokenizer(a.tokenizer);
  const colossal::text::Tokenizer& tok = *tokenizer;

  // ---- tokenised datasets (rank 0 builds the cache, the others map it)
  DatasetOptions dopt;
  dopt.files = a.dataset;
  dopt.cache_dir = a.output + "/cache";
  dopt.mode = a.mode;
  dopt.max_length = a.max_length;
  dopt.on_bad_line = a.on_bad_line;
  dopt.chat_template = a.chat_template;
  dopt.packing = a.packing;
  std::optional<TokenDataset> train_tokens;
  std::optional<PreferenceTask> pairs;  // --mode dpo
  std::optional<GrpoTask> prompts;  // --mode grpo
  if (grpo) {
    prompts.emplace(a, tokenizer, corpus_train, reward);
  } else if (preference) {
    pairs.emplace(a, tok, corpus_train, corpus_eval);
  } else {
    on_rank0_then_all([&] { (void)TokenDataset::open(dopt, tok); });
    train_tokens.emplace(TokenDataset::open(dopt, tok));
    COLOSSAL_CHECK(train_tokens->size() > 0, "the training data holds no sample of ", a.max_length, " tokens");
  }
  std::optional<TokenDataset> eval;
  if (!a.eval_dataset.empty() && !preference && !grpo) {
    auto eopt = dopt;
    eopt.files = {a.eval_dataset};
    on_rank0_then_all([&] { (void)TokenDataset::open(eopt, tok); });
    eval.emplace(TokenDataset::open(eopt, tok));
    // A score over nothing would read as perfect (loss 0, perplexity 1).
    COLOSSAL_CHECK(eval->size() > 0, "--eval_dataset ", a.eval_dataset, ": ", eval->num_tokens(),
                   " tokens, fewer than one sample of --max_length ", a.max_length,
                   "; give a longer evaluation set, a smaller --max_length, or --eval_interval 0 with no --eval_dataset");
  }

  // ---- model
  LlamaConfig cfg;
  LlamaForCausalLM model{nullptr};
  // Checks the layout against the model's shapes (every rank, before any group exists), then
  // creates the groups the model is built with.
  auto parallel_for = [&](const LlamaConfig& config) {
    check_parallel(config, dims, a.max_length);
    return plugin->parallel_context();  // the groups, and under pp this rank's stage
  };
  if (!a.pretrained.empty()) {
    // Lazily: each weight is read from the mapped files when boost() places it, straight into
    // what this rank keeps (its ZeRO-3 shards, its tensor-parallel slices).
    auto loaded = load_pretrained_lazily(a.pretrained, parallel_for(LlamaConfig::from_json_file(a.pretrained + "/config.json")));
    cfg = loaded.config;
    model = loaded.model;
    COLOSSAL_CHECK(tok.vocab_size() <= cfg.vocab_size, "tokenizer ", a.tokenizer, " has ", tok.vocab_size(),
                   " pieces but the model's vocab_size is ", cfg.vocab_size);
  } else {
    cfg = a.model_config.empty() ? default_config(a.max_length) : LlamaConfig::from_json_file(a.model_config);
    cfg.vocab_size = tok.vocab_size();
    cfg.bos_token_id = tok.bos_id();
    cfg.eos_token_id = tok.eos_id();
    auto parallel = parallel_for(cfg);
    torch::manual_seed(a.loop.seed);
    // Lazily: no weight exists until boost() makes what this rank keeps (its ZeRO-3 shards, its
    // tensor-parallel slices), with the values an eager build would have (nn/deferred_init.h).
    colossal::nn::DeferredInitGuard deferred;
    model = LlamaForCausalLM(cfg, parallel);
  }
  // The load-balancing loss and the capacity are statistics of one forward's tokens (each
  // replica's own, as in transformers and Megatron); verify's reference runs every replica's
  // samples in one forward and would report that difference as a broken layout.
  const int replicas = static_cast<int>(std::max<int64_t>(dims.dp(), job.batch_factor()));
  COLOSSAL_CHECK(!job.verifying() || !cfg.is_moe() || (cfg.router_aux_loss_coef == 0 && cfg.capacity_factor == 0) ||
                     replicas == 1,
                 "colossal verify with a mixture-of-experts model over ", replicas,
                 " data-parallel replicas: router_aux_loss_coef ", cfg.router_aux_loss_coef, " and capacity_factor ",
                 cfg.capacity_factor, " make each replica's loss a statistic of its own forward's tokens, which the "
                 "one-process reference (every replica's samples in one forward) does not reproduce; verify the layout "
                 "with both 0 in the model's config.json");
  COLOSSAL_CHECK(a.max_length <= cfg.max_position_embeddings || cfg.rope_scaling.type == "dynamic",
                 "--max_length ", a.max_length, " exceeds the model's max_position_embeddings ",
                 cfg.max_position_embeddings);
  model->set_gradient_checkpointing(a.grad_checkpoint);
  model->set_neftune(a.neftune_noise_alpha, a.loop.seed);
  if (a.mode == "rm") {
    // A reward model: the score head on the final norm (its lm_head, if untied, frozen and unused).
    COLOSSAL_CHECK(!a.lora.enabled() && a.lora_adapter.empty(), "--mode rm with LoRA is not supported yet: train the "
                   "reward model in full");
    model->add_score_head(a.loop.seed);
  }
  const std::string quantize_base = a.lora.quantize_base;
  if (!a.lora_adapter.empty()) {
    a.lora = colossal::peft::load_adapter(*model, a.lora_adapter, {"lm_head"});
    a.lora.quantize_base = quantize_base;
    if (r == 0)
      std::printf("lora: continuing %s (rank %ld, alpha %g)\n", a.lora_adapter.c_str(), a.lora.rank, a.lora.alpha);
  } else if (a.lora.enabled()) {
    a.lora.targets = colossal::peft::split_names(a.lora.targets);
    a.lora.modules_to_save = colossal::peft::split_names(a.lora.modules_to_save);
    a.lora.seed = a.loop.seed;
    // all-linear: every linear layer of the blocks, not the output head (as PEFT's all-linear).
    const auto layers = colossal::peft::enable_lora(*model, a.lora, {"lm_head"});
    for (const auto& name : layers.adapted)
      COLOSSAL_CHECK(name != "lm_head", "[lora] lm_head: adapters on the output head are not supported (the loss "
                     "reads its weight directly); train it in full with --lora_modules_to_save lm_head");
    if (r == 0)
      std::printf("lora: rank %ld, alpha %g, %zu layers adapted (%s); %.2fM trainable, %.2fM frozen parameters on "
                  "rank 0\n", a.lora.rank, a.lora.alpha, layers.adapted.size(), a.lora.init.c_str(),
                  layers.trainable / 1e6, layers.frozen / 1e6);
  } else {
    COLOSSAL_CHECK(!a.merge_lora, "--merge_lora needs --lora_rank > 0");
  }
  if (!quantize_base.empty()) {
    // QLoRA: every frozen linear weight but the head in 4 or 8 bits, read and quantized one at a
    // time (a lazily loaded checkpoint never exists whole in full precision).
    COLOSSAL_CHECK(device.is_cpu(), "--quantize_base: the quantized base runs on the CPU in this version");
    COLOSSAL_CHECK(!a.merge_lora || !a.pretrained.empty(), "--merge_lora with --quantize_base needs --pretrained: the "
                   "adapter is folded into the original weights, which the run no longer holds");
    const auto q = colossal::peft::quantize_base(*model, quantize_base, {"lm_head"});
    if (r == 0)
      std::printf("qlora: %zu base layers in %s, %.1f MB on rank 0 (%.1f MB in fp32)\n", q.layers.size(),
                  quantize_base.c_str(), q.bytes / 1e6, q.full_bytes / 1e6);
  }

  if (!colossal::nn::has_deferred_parameters(*model)) model->to(device);  // else boost makes them there

  // ---- the task for the shared loop (apps/common/train_loop.h)
  colossal::apps::TrainTask task;
  task.name = "train_llama";
  task.plugin = plugin;
  task.model = model.ptr();
  task.optimizer = colossal::optim::make_optimizer(
      *model, {.name = "fused_adamw", .lr = a.lr, .weight_decay = a.weight_decay, .beta2 = 0.95});
  task.schedule = [&](int64_t total_steps) {
    int64_t warmup = a.warmup_steps;
    if (warmup >= total_steps) {
      warmup = total_steps / 10;
      if (r == 0)
        std::printf("note: --warmup_steps %ld >= %ld steps; warming up for %ld\n", a.warmup_steps, total_steps, warmup);
    }
    return colossal::optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = warmup, .total_steps = total_steps,
                                                 .min_lr_ratio = 0.1};
  };
  task.train_samples = preference ? pairs->train().size() : grpo ? prompts->train().size() : train_tokens->size();
  task.micro_batch = a.batch_size;
  task.drop_last = false;
  task.epochs = a.num_epochs;
  task.batch_flag = "--batch_size " + std::to_string(a.batch_size);
  task.length_flags = "--max_steps";
  task.throughput_unit = "tokens";
  task.units_per_sample = static_cast<double>(a.max_length);
  // LoRA: the frozen weights get no gradient, so a step is about the forward and the input
  // gradients (2/3 of full training's FLOPs, as bench_llama counts it).
  task.flops_per_sample = training_flops_per_token(cfg, a.max_length) * static_cast<double>(a.max_length) *
                          (a.lora.enabled() ? 2.0 / 3 : 1.0);
  // MoE: expert load and router losses since the last line (under pp, the last stage's routing
  // pools every stage's, and the report sums over the stages and replicas).
  colossal::parallel::expert::RouterWindow router_window(cfg.num_local_experts);
  task.loss = [&](colossal::apps::StepContext& ctx) {
    auto batch = train_tokens->batch(ctx.positions);
    auto loss = model->loss(batch.input_ids.to(device), batch.labels.to(device), batch.position_ids);
    if (cfg.is_moe()) router_window.add(model->router_losses());
    return loss;
  };
  if (a.mode == "sft")  // conversations differ in reply tokens: the step's mean is over all of them
    task.loss_weight = [&](const std::vector<int64_t>& positions) {
      auto labels = train_tokens->batch(positions).labels;
      return labels.narrow(1, 1, labels.size(1) - 1).ne(-100).sum().item<double>();
    };
  // Pipeline parallelism: each step's batch runs through the stages in microbatches.
  const auto& pipeline = model->parallel_context().pipeline;
  const bool pipelined = pipeline.enabled();
  const auto stage = colossal::llama::stage_functions(model);
  if (pipelined) {
    const int64_t microbatches = pipeline.microbatches_for(a.batch_size);  // --batch_size is per data-parallel rank
    auto pipeline_stage = stage;
    if (cfg.is_moe())
      pipeline_stage.loss = [&, loss = stage.loss](const torch::Tensor& logits, const torch::Tensor& labels) {
        auto l = loss(logits, labels);
        router_window.add(model->router_losses());
        return l;
      };
    task.loss_weight = nullptr;  // each microbatch's mean counts equally through the stages
    task.pipeline_step = [&, pipeline_stage, microbatches](colossal::apps::StepContext& ctx) {
      auto batch = train_tokens->batch(ctx.positions);
      auto ids = batch.input_ids.to(device).split(a.batch_size / microbatches);
      auto labels = batch.labels.to(device).split(a.batch_size / microbatches);
      return ctx.booster.execute_pipeline(ctx.optimizer, pipeline_stage, ids, labels);
    };
  }
  if (cfg.is_moe())
    task.log_metrics = [&](colossal::apps::Metrics& m, std::vector<std::pair<std::string, std::vector<double>>>& lists) {
      // Every replica's routing: each routes its own tokens.
      auto routed = router_window.report(pipelined ? dims.group({dist::Axis::kPp, dist::Axis::kDp})
                                                   : dims.group(dist::Axis::kDp));
      m.insert(m.end(), routed.metrics.begin(), routed.metrics.end());
      lists.push_back({"tokens_per_expert", routed.tokens_per_expert});
      router_window = colossal::parallel::expert::RouterWindow(cfg.num_local_experts);
    };
  const auto dp_replica = plugin->data_parallel_rank_and_size();
  if (eval) {
    task.evaluate = [&](const colossal::apps::EvalContext& ctx) -> std::optional<colossal::apps::Metrics> {
      PipelineEval pipeline_eval;
      if (pipelined)
        pipeline_eval = [&](const std::vector<torch::Tensor>& ids, const std::vector<torch::Tensor>& labels) {
          auto fns = stage;
          fns.loss = [&](const torch::Tensor& logits, const torch::Tensor& y) {  // token-weighted
            auto count = y.narrow(1, 1, y.size(1) - 1).ne(-100).sum().to(torch::kDouble);
            if (count.item<double>() == 0) return count;  // nothing to score (the mean would be 0 / 0)
            return model->loss_from_logits(logits, y) * count;
          };
          return ctx.booster.evaluate_pipeline(ctx.optimizer, fns, ids, labels) * static_cast<double>(ids.size());
        };
      const auto l = evaluate(model, *eval, a.batch_size, dp_replica, pipeline_eval);
      if (!l) return std::nullopt;  // every label masked
      return colossal::apps::Metrics{{"loss", *l}, {"perplexity", std::exp(*l)}};
    };
    task.eval_samples = eval->size();
  }
  if (pairs) pairs->configure(task, model, dp_replica, dims.group(dist::Axis::kDp), device);
  if (prompts) prompts->configure(task, model, dp_replica, dims.group(dist::Axis::kDp), device);
  task.checkpoint_dir = a.save_dir;
  // Every checkpoint's model/ opens as a model: config and tokenizer files beside the weights.
  task.model_files = model_dir_files(cfg, &tok);
  task.save_trainable_only = a.lora.enabled();  // a LoRA run's checkpoints: adapters, their optimizer, the position
  if (r == 0) {
    std::printf("model: %.2fM parameters (hidden %ld, layers %ld, heads %ld/%ld kv, vocab %ld)%s\n",
                cfg.num_parameters() / 1e6, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                cfg.num_key_value_heads, cfg.vocab_size, a.pretrained.empty() ? "" : (", from " + a.pretrained).c_str());
    if (cfg.is_moe())
      std::printf("experts: %ld per layer, top %ld, %.2fM active parameters per token; aux loss x %g, z-loss x %g, %s\n",
                  cfg.num_local_experts, cfg.num_experts_per_tok, cfg.num_active_parameters() / 1e6,
                  cfg.router_aux_loss_coef, cfg.router_z_loss_coef,
                  cfg.capacity_factor > 0 ? ("capacity factor " + std::to_string(cfg.capacity_factor)).c_str() : "dropless");
    if (prompts)
      std::printf("data: %ld prompts (%.0f tokens on average), %ld completions of up to %ld tokens each at temperature "
                  "%g; %s loss, epsilon %g/%g, beta %g; %d thread(s)/rank\n", prompts->train().size(),
                  prompts->train().mean_prompt_tokens(), a.grpo.num_generations, a.grpo.max_completion_length,
                  a.grpo.temperature, a.grpo.loss_type.c_str(), a.grpo.epsilon, a.grpo.epsilon_high, a.grpo.beta,
                  at::get_num_threads());
    else if (pairs)
      std::printf("data: %ld preference pairs (%.0f tokens per pair on average; %s loss, beta %g); %d thread(s)/rank\n",
                  pairs->train().size(), pairs->train().mean_pair_tokens(), a.preference.loss_type.c_str(),
                  a.preference.beta, at::get_num_threads());
    else if (a.packing)
      std::printf("data: %ld conversations packed into %ld samples of %ld tokens (%.1f%% filled); %d thread(s)/rank\n",
                  train_tokens->conversations(), train_tokens->size(), a.max_length, 100 * train_tokens->packed_fill(),
                  at::get_num_threads());
    else
      std::printf("data: %ld samples of %ld tokens (%s); %d thread(s)/rank\n", train_tokens->size(), a.max_length,
                  a.mode.c_str(), at::get_num_threads());
    if (a.neftune_noise_alpha > 0) std::printf("neftune: embedding noise alpha %g in training\n", a.neftune_noise_alpha);
    std::fflush(stdout);
  }
  auto run = job.run(task, summary);
  if (run.recorded) return;  // colossal verify: nothing else to write

  // ---- the Hugging Face directory: weights gathered whole whatever the plugin, config, tokenizer
  auto state = run.boosted.optimizer->model_wrapper().checkpoint().model_state_to_save(*model);
  std::string out = a.output + "/model";
  if (a.lora.enabled()) {
    // The adapter in PEFT's format (whole tensors, whatever the layout); the merged model only
    // when asked for.
    const std::string adapter = a.output + "/adapter";
    if (r == 0) {
      colossal::peft::save_adapter(colossal::peft::adapter_tensors(state, a.lora), a.lora, adapter, a.pretrained);
      std::printf("saved: %s (adapter_config.json, adapter_model.safetensors)\n", adapter.c_str());
    }
    summary.outputs["adapter"] = adapter;
    if (!a.merge_lora) {
      dist::barrier(dist::world_group());
      summary.outputs["checkpoints"] = a.save_dir;
      std::fflush(stdout);
      return;
    }
    if (!quantize_base.empty()) {
      // The base in the run is quantized: fold the adapter into the original weights instead.
      if (r == 0) {
        const auto merged = colossal::peft::write_merged_model(a.pretrained, adapter, out);
        std::printf("saved: %s (%s with the adapter folded in: %zu tensors)\n", out.c_str(), a.pretrained.c_str(),
                    merged.tensors);
      }
      dist::barrier(dist::world_group());
      summary.outputs["model"] = out;
      summary.outputs["checkpoints"] = a.save_dir;
      std::fflush(stdout);
      return;
    }
    state = colossal::peft::merged_state(state, a.lora);
  }
  if (a.mode == "rm") {
    // transformers' <Family>ForSequenceClassification: the decoder and "score", no lm_head.
    if (r == 0) {
      save_reward_model(cfg, state, out, tok, pairs->train().pad_id());
      std::printf("saved: %s (a %s reward model)\n", out.c_str(), reward_architecture(cfg).c_str());
    }
    dist::barrier(dist::world_group());
    summary.outputs["model"] = out;
    summary.outputs["checkpoints"] = a.save_dir;
    std::fflush(stdout);
    return;
  }
  if (r == 0) {
    save_pretrained(cfg, state, out, {}, &tok);
    auto files = colossal::fs::list_dir(out);  // what was written: tokenizer.model or tokenizer.json, as the tokenizer is
    std::sort(files.begin(), files.end());
    std::string listed;
    for (const auto& f : files) listed += (listed.empty() ? "" : ", ") + f;
    std::printf("saved: %s (%s)\n", out.c_str(), listed.c_str());
  }
  dist::barrier(dist::world_group());
  if (a.sample_tokens > 0 && r == 0) {
    auto loaded = load_pretrained(out);  // as a user would load it
    std::printf("sample: %s%s\n", a.prompt.c_str(), generate(loaded.model, tok, a.prompt, a.sample_tokens).c_str());
  }
  summary.outputs["model"] = out;
  summary.outputs["checkpoints"] = a.save_dir;
  summary.outputs["tokenizer"] = a.tokenizer;
  std::fflush(stdout);
}

}  // namespace

namespace colossal::llama_app {

colossal::apps::RunSummary train_llama(const std::vector<std::string>& args, const RewardFunction& reward) {
  return colossal::apps::run_job<TrainArgs>("train_llama", args, &parse_train_args,
                                            [&](TrainArgs& a, colossal::apps::RunSummary& s) { run(a, s, reward); });
}

}  // namespace colossal::llama_app
