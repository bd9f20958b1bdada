// train_llama: train a LLaMA-style model on JSONL text, one process or many, and write a Hugging
// Face model directory; then generate from it.
//
// With no arguments it trains a small LLaMA on the built-in corpus (Jane Austen's novels,
// fetched by scripts/setup.sh), training a SentencePiece tokenizer first, and prints a sample:
//   build/apps/train_llama
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_llama --plugin zero2 --steps 300
#include <sys/stat.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "core/booster/booster.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/data/distributed_sampler.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/factory.h"
#include "core/optim/lr_scheduler.h"
#include "llama/corpus.h"
#include "llama/dataset.h"
#include "llama/pretrained.h"
#include "llama/tokenizer.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using namespace colossal::llama;

namespace {

struct Args {
  std::vector<std::string> data;  // JSONL; empty: the built-in corpus
  std::string tokenizer;          // tokenizer.model; empty: train one (cached in --output)
  int64_t vocab_size = 4000;
  std::string config;             // config.json; empty: the small default below
  std::string output = "out/llama";
  std::string plugin = "ddp";
  std::string precision = "fp32";
  std::string mode = "pretrain";
  int64_t max_length = 128, batch_size = 16, steps = 200, warmup = 20, eval_every = 50, log_every = 10;
  double lr = 3e-3, weight_decay = 0.1, clip = 1.0;
  uint64_t seed = 42;
  std::string prompt = "It is a truth universally acknowledged";
  int64_t sample_tokens = 40;
};

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

double mean_loss(LlamaForCausalLM& model, const TokenDataset& data) {
  torch::NoGradGuard no_grad;
  int n = dist::world_size(), r = dist::rank();
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = r; i < data.size() && i < 64; i += n, ++count) {
    auto b = data.batch({i});
    sum += model->loss(b.input_ids, b.labels).item<double>();
  }
  auto t = torch::tensor({sum, static_cast<double>(count)}, torch::kFloat64);
  dist::all_reduce(t, dist::world_group());
  return t[0].item<double>() / std::max(1.0, t[1].item<double>());
}

// Greedy continuation of `prompt` (full recompute per token: the serving engine is infer_llama).
std::string generate(LlamaForCausalLM& model, const Tokenizer& tok, const std::string& prompt, int64_t n) {
  torch::NoGradGuard no_grad;
  auto ids = tok.encode(prompt, true, false);
  size_t prompt_len = ids.size();
  for (int64_t i = 0; i < n; ++i) {
    int64_t max_len = model->config().max_position_embeddings;
    int64_t start = std::max<int64_t>(0, static_cast<int64_t>(ids.size()) - max_len);
    auto input = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kInt64).unsqueeze(0);
    auto logits = model->forward(input);
    int64_t next = logits[0][-1].argmax().item<int64_t>();
    if (next == tok.eos_id()) break;
    ids.push_back(next);
  }
  return tok.decode(std::vector<int64_t>(ids.begin() + prompt_len, ids.end()));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Train a LLaMA-style model (default: a small one on Jane Austen's novels)"};
  app.add_option("--data", a.data, "JSONL files (default: the built-in corpus)");
  app.add_option("--tokenizer", a.tokenizer, "SentencePiece tokenizer.model (default: train one)");
  app.add_option("--vocab_size", a.vocab_size, "vocabulary of a trained tokenizer")->capture_default_str();
  app.add_option("--config", a.config, "Hugging Face config.json (default: a small LLaMA)");
  app.add_option("--output", a.output, "where the model directory, tokenizer and data cache go")->capture_default_str();
  app.add_option("--plugin", a.plugin, "ddp | zero1 | zero2 | zero3")->capture_default_str();
  app.add_option("--precision", a.precision, "fp32 | bf16 | fp16")->capture_default_str();
  app.add_option("--mode", a.mode, "pretrain | sft")->capture_default_str();
  app.add_option("--max_length", a.max_length, "tokens per sample")->capture_default_str();
  app.add_option("--batch_size", a.batch_size, "global batch size (samples)")->capture_default_str();
  app.add_option("--steps", a.steps, "optimizer steps")->capture_default_str();
  app.add_option("--warmup", a.warmup, "warm-up steps")->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--weight_decay", a.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--clip", a.clip, "gradient clipping norm (0: off)")->capture_default_str();
  app.add_option("--eval_every", a.eval_every, "steps between evaluations on the held-out split")->capture_default_str();
  app.add_option("--seed", a.seed, "random seed")->capture_default_str();
  app.add_option("--prompt", a.prompt, "text to continue after training")->capture_default_str();
  app.add_option("--sample_tokens", a.sample_tokens, "tokens to generate (0: none)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    dist::init();
    int n = dist::world_size(), r = dist::rank();
    COLOSSAL_CHECK(a.batch_size % n == 0, "--batch_size ", a.batch_size, " must divide by the ranks (", n, ")");
    (void)!std::system(("mkdir -p '" + a.output + "'").c_str());
    std::vector<std::string> valid_files;
    if (a.data.empty()) {  // the built-in corpus
      std::string dir = a.output + "/data";
      if (r == 0 && !exists(dir + "/train.jsonl")) {
        auto split = write_austen_jsonl(default_austen_rdb(), dir);
        std::printf("corpus: Jane Austen's novels, %ld training paragraphs (%.1f MB), %ld held out\n",
                    split.train_records, split.train_bytes / 1e6, split.valid_records);
      }
      dist::barrier(dist::world_group());
      a.data = {dir + "/train.jsonl"};
      valid_files = {dir + "/valid.jsonl"};
    }
    if (a.tokenizer.empty()) {
      a.tokenizer = a.output + "/tokenizer.model";
      if (r == 0 && !exists(a.tokenizer)) {
        auto t0 = std::chrono::steady_clock::now();
        TrainTokenizerOptions o;
        o.vocab_size = a.vocab_size;
        train_tokenizer(a.data, a.output + "/tokenizer", o);
        std::printf("tokenizer: trained %ld pieces in %.1f s\n", a.vocab_size,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      dist::barrier(dist::world_group());
    }
    auto tok = Tokenizer::load(a.tokenizer);
    DatasetOptions dopt;
    dopt.files = a.data;
    dopt.cache_dir = a.output + "/cache";
    dopt.mode = a.mode;
    dopt.max_length = a.max_length;
    // Rank 0 tokenises; the others map its files.
    if (r == 0) (void)TokenDataset::open(dopt, tok);
    dist::barrier(dist::world_group());
    auto train = TokenDataset::open(dopt, tok);
    std::optional<TokenDataset> valid;
    if (!valid_files.empty()) {
      auto vopt = dopt;
      vopt.files = valid_files;
      if (r == 0) (void)TokenDataset::open(vopt, tok);
      dist::barrier(dist::world_group());
      valid.emplace(TokenDataset::open(vopt, tok));
    }

    LlamaConfig cfg;
    if (!a.config.empty()) {
      cfg = LlamaConfig::from_json_file(a.config);
    } else {
      cfg.hidden_size = 256;
      cfg.intermediate_size = 688;
      cfg.num_hidden_layers = 4;
      cfg.num_attention_heads = 4;
      cfg.num_key_value_heads = 2;
      cfg.max_position_embeddings = a.max_length;
    }
    cfg.vocab_size = tok.vocab_size();
    cfg.bos_token_id = tok.bos_id();
    cfg.eos_token_id = tok.eos_id();
    torch::manual_seed(a.seed);
    LlamaForCausalLM model(cfg);
    if (r == 0)
      std::printf("model: %.2fM parameters (hidden %ld, layers %ld, heads %ld/%ld kv), %ld training samples of %ld tokens\n",
                  cfg.num_parameters() / 1e6, cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                  cfg.num_key_value_heads, train.size(), a.max_length);

    auto optimizer = colossal::optim::make_optimizer(
        *model, {.name = "fused_adamw", .lr = a.lr, .weight_decay = a.weight_decay, .beta2 = 0.95});
    auto scheduler = std::make_shared<colossal::optim::LRScheduler>(
        *optimizer, colossal::optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = a.warmup,
                                                          .total_steps = a.steps, .min_lr_ratio = 0.1});
    auto sampler = std::make_shared<colossal::data::DistributedSampler>(
        colossal::data::DistributedSampler::Options{.dataset_size = train.size(), .seed = a.seed});
    booster::Booster booster(booster::make_plugin(a.plugin, a.precision));
    auto b = booster.boost(model.ptr(), optimizer, scheduler, sampler);
    const int64_t local = a.batch_size / n;
    int64_t epoch = 0;
    auto t0 = std::chrono::steady_clock::now();
    double first_eval = valid ? mean_loss(model, *valid) : 0;
    if (r == 0 && valid) std::printf("step    0  held-out loss %.4f\n", first_eval);
    for (int64_t step = 1; step <= a.steps; ++step) {
      if (sampler->epoch_done()) sampler->set_epoch(++epoch);
      auto idx = sampler->next(local);
      auto batch = train.batch(idx);
      b.optimizer->zero_grad();
      auto loss = model->loss(batch.input_ids, batch.labels);
      booster.backward(loss, *b.optimizer);
      double norm = a.clip > 0 ? booster.clip_grad_norm(*b.optimizer, a.clip) : 0;
      b.optimizer->step();
      b.lr_scheduler->step();
      if (step % a.log_every == 0 || step == a.steps) {
        auto l = loss.detach().to(torch::kFloat64).reshape({1});
        dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r == 0)
          std::printf("step %4ld/%ld  loss %.4f  grad_norm %.3f  lr %.2e  %.0f tokens/s\n", step, a.steps,
                      l.item<double>(), norm, b.lr_scheduler->lr(), step * a.batch_size * a.max_length / s);
      }
      if (valid && (step % a.eval_every == 0 || step == a.steps)) {
        double v = mean_loss(model, *valid);
        if (r == 0) std::printf("step %4ld  held-out loss %.4f\n", step, v);
      }
      std::fflush(stdout);
    }
    // The Hugging Face directory: weights gathered whole whatever the plugin, config, tokenizer.
    auto state = b.optimizer->model_wrapper().full_model_state(*model);
    if (r == 0) {
      std::string out = a.output + "/model";
      save_pretrained(cfg, state, out);
      (void)!std::system(("cp '" + a.tokenizer + "' '" + out + "/tokenizer.model'").c_str());
      std::printf("saved: %s (config.json, generation_config.json, model.safetensors, tokenizer.model)\n",
                  out.c_str());
    }
    dist::barrier(dist::world_group());
    if (a.sample_tokens > 0 && r == 0) {
      // A fresh model from the saved directory, as a user would load it.
      auto loaded = load_pretrained(a.output + "/model");
      std::printf("sample: %s%s\n", a.prompt.c_str(),
                  generate(loaded.model, tok, a.prompt, a.sample_tokens).c_str());
    }
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_llama: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
