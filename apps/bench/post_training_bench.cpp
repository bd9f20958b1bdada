// bench_post_training, on the CPU, in one run:
//  - DPO: steps of train_llama --mode dpo beside TRL's DPOTrainer on the same model directory,
//    pairs, batch, learning rate and steps. Both sides precompute the reference log-probabilities
//    before training (TRL: precompute_ref_log_probs) and report the median step after the first;
//    peak memory is each process's maximum resident set (/usr/bin/time). Goal: ours >= 1.3x TRL's
//    pairs per second.
//  - GRPO rollout: one step's completions (--prompts prompts x --generations samples of
//    --completion tokens at temperature 1) from the rollout engine train_llama --mode grpo uses
//    (taking the weights, then sampling; llama/rollout.h) beside transformers' generate on the
//    same prompt tokens (num_return_sequences, what TRL's GRPOTrainer calls without vLLM). Both run
//    every completion to its full length (EOS ignored), so both do the same work whatever they
//    sample; the median round after the first. Goal: ours >= 5x generate's tokens per second.
//
//   build/apps/bench_post_training [--part dpo|grpo|all] [--hidden 512 --layers 8] [--threads 2]
//
// A base model is made once under --work (train_llama's tokenizer and one step of training, saved
// as a Hugging Face directory), with the built-in preference pairs (llama::write_preference_pairs)
// and prompts (llama::make_chat_tasks).
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/common/check.h"
#include "core/common/fs.h"
#include "llama/chat_tasks.h"
#include "llama/corpus.h"
#include "llama/preference_data.h"
#include "llama/pretrained.h"
#include "llama/prompt_data.h"
#include "llama/rollout.h"
#include "llama/tokenizer.h"

namespace {

std::string here() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  COLOSSAL_CHECK(n > 0, "[bench_post_training] cannot find its own directory");
  std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

bool exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

void run(const std::string& what, const std::string& cmd) {
  std::printf("[bench_post_training] %s...\n", what.c_str());
  std::fflush(stdout);
  COLOSSAL_CHECK(std::system(cmd.c_str()) == 0, "[bench_post_training] ", what, " failed: ", cmd);
}

double peak_gib(const std::string& file) {  // /usr/bin/time -f %M: KiB
  std::ifstream in(file);
  double kib = 0;
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && std::isdigit(static_cast<unsigned char>(line[0]))) kib = std::stod(line);
  return kib / (1 << 20);
}

double median(std::vector<double> v) {
  COLOSSAL_CHECK(!v.empty(), "[bench_post_training] no step was timed");
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Options {
  std::string part = "all";
  int64_t hidden = 512, layers = 8, heads = 8, threads = 2, max_length = 128;
  int64_t batch = 4, steps = 8;                                    // DPO
  int64_t prompts = 8, generations = 8, completion = 64, rounds = 4;  // GRPO rollout
  std::string work = "/tmp/bench_post_training", python = COLOSSAL_DEFAULT_PYTHON;
};

std::string shape_of(const Options& o) { return "h" + std::to_string(o.hidden) + "-l" + std::to_string(o.layers); }

// The base model: train_llama's tokenizer on the built-in corpus and one step, as a Hugging Face
// directory under --work (made once; its data/train.jsonl is the corpus).
std::string make_base(const Options& o, const std::string& bin, const std::string& env) {
  const std::string shape = shape_of(o), base = o.work + "/base-" + shape;
  if (exists(base + "/model/config.json")) return base;
  nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                           {"hidden_size", o.hidden}, {"intermediate_size", (o.hidden * 8 / 3 + 63) / 64 * 64},
                           {"num_hidden_layers", o.layers}, {"num_attention_heads", o.heads},
                           {"num_key_value_heads", std::max<int64_t>(1, o.heads / 2)},
                           {"max_position_embeddings", std::max<int64_t>(o.max_length, 256)}, {"rms_norm_eps", 1e-5},
                           {"vocab_size", 4000}};  // replaced by the tokenizer's
  std::ofstream(o.work + "/" + shape + ".json") << config.dump(2);
  run("the base model (" + shape + ")",
      env + bin + "/train_llama --model_config " + o.work + "/" + shape + ".json --output " + base +
          " --max_steps 1 --batch_size 1 --max_length " + std::to_string(o.max_length) +
          " --eval_interval -1 --sample_tokens 0 --load_checkpoint none > " + o.work + "/base.log 2>&1");
  return base;
}


void bench_dpo(const Options& o, const std::string& base, const std::string& bin, const std::string& env) {
  const std::string pairs = o.work + "/pairs.jsonl";
  if (!exists(pairs)) colossal::llama::write_preference_pairs(base + "/data/train.jsonl", pairs);
  const auto tokenizer = colossal::llama::load_tokenizer(base + "/model");
  colossal::llama::PreferenceDataOptions po;
  po.files = {pairs};
  po.max_length = o.max_length;
  const double pair_tokens = colossal::llama::PreferenceDataset::open(po, *tokenizer).mean_pair_tokens();

  const std::string common = " --max_length " + std::to_string(o.max_length) + " --lr 1e-5 --beta 0.1";
  const std::string ours_log = o.work + "/ours.jsonl";
  std::remove(ours_log.c_str());
  run("ours: train_llama --mode dpo",
      env + "/usr/bin/time -f %M -o " + o.work + "/ours.rss " + bin + "/train_llama --mode dpo --pretrained " + base +
          "/model --dataset " + pairs + " --output " + o.work + "/ours --load_checkpoint none --max_steps " +
          std::to_string(o.steps) + " --batch_size " + std::to_string(o.batch) + common +
          " --warmup_steps 0 --eval_interval -1 --log_interval 1 --sample_tokens 0 --log_file " + ours_log +
          " > " + o.work + "/ours.log 2>&1");
  std::vector<double> rates;
  std::ifstream in(ours_log);
  for (std::string line; std::getline(in, line);) {
    auto js = nlohmann::json::parse(line, nullptr, false);
    if (js.is_object() && js.contains("tokens/s") && js.value("step", 0) > 1) rates.push_back(js["tokens/s"]);
  }
  const double ours_pairs = median(rates) / pair_tokens;
  const double ours_peak = peak_gib(o.work + "/ours.rss");
  run("TRL: DPOTrainer",
      env + "/usr/bin/time -f %M -o " + o.work + "/trl.rss '" + o.python + "' " + COLOSSAL_SOURCE_DIR +
          "/apps/bench/dpo_trl_reference.py --model " + base + "/model --pairs " + pairs + " --out " + o.work +
          "/trl --batch " + std::to_string(o.batch) + " --steps " + std::to_string(o.steps) + " --threads " +
          std::to_string(o.threads) + " --max_length " + std::to_string(o.max_length) + " > " + o.work +
          "/trl.log 2>&1");
  std::ifstream tin(o.work + "/trl.log");
  nlohmann::json trl;
  for (std::string line; std::getline(tin, line);)
    if (line.rfind("{\"step_s\"", 0) == 0) trl = nlohmann::json::parse(line);
  COLOSSAL_CHECK(trl.is_object(), "[bench_post_training] TRL printed no result; see ", o.work, "/trl.log");
  const double trl_pairs = trl["pairs_per_s"], trl_peak = peak_gib(o.work + "/trl.rss");
  std::printf("\nDPO, %s (%s), batch %ld pairs (%.0f tokens per pair on average), %ld thread(s), median step "
              "after the first of %ld\n",
              shape_of(o).c_str(), base.c_str(), o.batch, pair_tokens, o.threads, o.steps);
  std::printf("%-28s %10s %10s %10s\n", "impl", "pairs/s", "tokens/s", "peak GiB");
  std::printf("%-28s %10.2f %10.0f %10.2f\n", "ours: train_llama --mode dpo", ours_pairs, ours_pairs * pair_tokens,
              ours_peak);
  std::printf("%-28s %10.2f %10.0f %10.2f\n", "TRL DPOTrainer", trl_pairs, trl_pairs * pair_tokens, trl_peak);
  const double ratio = ours_pairs / trl_pairs;
  std::printf("ratio ours / TRL: %.2fx pairs/s, %.2fx peak memory (goal: >= 1.3x)%s\n", ratio, ours_peak / trl_peak,
              ratio >= 1.3 ? "" : " (below goal)");
}

void bench_grpo_rollout(const Options& o, const std::string& base, const std::string& env) {
  // One step's prompts per round, rendered as train_llama --mode grpo renders them; their token ids
  // go to the transformers side so that both generate from the same tokens.
  const int64_t count = o.prompts * o.rounds;
  const auto tokenizer = std::shared_ptr<const colossal::text::Tokenizer>(colossal::llama::load_tokenizer(base + "/model"));
  const std::string prompts_file = o.work + "/grpo_prompts.jsonl";
  colossal::llama::write_chat_tasks(
      colossal::llama::make_chat_tasks(count, 5, colossal::llama::words_of(base + "/data/train.jsonl")), prompts_file,
      false);
  colossal::llama::PromptDataOptions po;
  po.files = {prompts_file};
  po.max_length = 256;
  po.completion_tokens = o.completion;
  const auto data = colossal::llama::PromptDataset::open(po, *tokenizer);
  COLOSSAL_CHECK(data.size() == count, "[bench_post_training] ", data.size(), " of ", count, " prompts opened");
  nlohmann::json ids = nlohmann::json::array();
  for (int64_t i = 0; i < count; ++i) ids.push_back(data.prompt(i).ids);
  std::ofstream(o.work + "/grpo_prompt_ids.json") << ids.dump();

  std::printf("[bench_post_training] ours: the rollout engine...\n");
  std::fflush(stdout);
  at::set_num_threads(static_cast<int>(o.threads));
  auto loaded = colossal::llama::load_pretrained(base + "/model");
  colossal::llama::RolloutEngine engine(loaded.model, tokenizer);
  std::vector<double> ours, refresh;
  for (int64_t round = 0; round < o.rounds; ++round) {
    std::vector<std::vector<int64_t>> prompts;
    std::vector<uint64_t> seeds;
    for (int64_t p = 0; p < o.prompts; ++p)
      for (int64_t g = 0; g < o.generations; ++g) {
        prompts.push_back(data.prompt(round * o.prompts + p).ids);
        seeds.push_back(static_cast<uint64_t>((round * o.prompts + p) * o.generations + g));
      }
    const auto t0 = std::chrono::steady_clock::now();
    engine.refresh();  // as after every optimizer step
    refresh.push_back(seconds_since(t0));
    const auto completions = engine.sample(prompts, seeds, o.completion, 1.0, /*ignore_eos=*/true);
    ours.push_back(seconds_since(t0));
    for (const auto& c : completions)
      COLOSSAL_CHECK(static_cast<int64_t>(c.tokens.size()) == o.completion, "[bench_post_training] a completion has ",
                     c.tokens.size(), " tokens, not ", o.completion);
  }
  ours.erase(ours.begin());  // the first round warms the allocator and the kernels
  refresh.erase(refresh.begin());

  run("transformers: generate",
      env + "'" + o.python + "' " + COLOSSAL_SOURCE_DIR + "/apps/bench/grpo_generate_reference.py --model " + base +
          "/model --prompt_ids " + o.work + "/grpo_prompt_ids.json --prompts " + std::to_string(o.prompts) +
          " --generations " + std::to_string(o.generations) + " --completion " + std::to_string(o.completion) +
          " --threads " + std::to_string(o.threads) + " > " + o.work + "/generate.log 2>&1");
  std::ifstream in(o.work + "/generate.log");
  nlohmann::json hf;
  for (std::string line; std::getline(in, line);)
    if (line.rfind("{\"round_s\"", 0) == 0) hf = nlohmann::json::parse(line);
  COLOSSAL_CHECK(hf.is_object(), "[bench_post_training] generate printed no result; see ", o.work, "/generate.log");
  const double tokens = static_cast<double>(o.prompts * o.generations * o.completion);
  const double ours_s = median(ours), hf_s = hf["round_s"];
  std::printf("\nGRPO rollout, %s (%s): %ld prompts x %ld completions of %ld tokens (%.0f prompt tokens on "
              "average), temperature 1, %ld thread(s), median round after the first of %ld\n",
              shape_of(o).c_str(), base.c_str(), o.prompts, o.generations, o.completion, data.mean_prompt_tokens(),
              o.threads, o.rounds);
  std::printf("%-40s %10s %10s\n", "impl", "s/round", "tokens/s");
  std::printf("%-40s %10.3f %10.0f\n", "ours: rollout engine (refresh + sample)", ours_s, tokens / ours_s);
  std::printf("%-40s %10.3f %10.0f\n", "transformers generate", hf_s, tokens / hf_s);
  std::printf("(ours: %.3f s of the round takes the weights)\n", median(refresh));
  const double ratio = hf_s / ours_s;
  std::printf("ratio ours / generate: %.2fx tokens/s (goal: >= 5x)%s\n", ratio, ratio >= 5 ? "" : " (below goal)");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Post-training: DPO steps beside TRL's DPOTrainer; a GRPO rollout beside transformers' generate"};
  app.add_option("--part", o.part, "dpo | grpo | all")->check(CLI::IsMember({"dpo", "grpo", "all"}))
      ->capture_default_str();
  app.add_option("--hidden", o.hidden, "the model's hidden size (intermediate 8/3 of it)")->capture_default_str();
  app.add_option("--layers", o.layers, "decoder layers")->capture_default_str();
  app.add_option("--heads", o.heads, "attention heads (half as many key/value heads)")->capture_default_str();
  app.add_option("--threads", o.threads, "threads of each side")->capture_default_str();
  app.add_option("--max_length", o.max_length, "DPO: tokens per sequence at most")->capture_default_str();
  app.add_option("--batch", o.batch, "DPO: pairs per step")->capture_default_str();
  app.add_option("--steps", o.steps, "DPO: steps (the first is not timed)")->capture_default_str();
  app.add_option("--prompts", o.prompts, "GRPO: prompts per round")->capture_default_str();
  app.add_option("--generations", o.generations, "GRPO: completions per prompt")->capture_default_str();
  app.add_option("--completion", o.completion, "GRPO: tokens per completion")->capture_default_str();
  app.add_option("--rounds", o.rounds, "GRPO: rollouts (the first is not timed)")->capture_default_str();
  app.add_option("--work", o.work, "where the base model, data and logs go")->capture_default_str();
  app.add_option("--python", o.python, "Python with torch, transformers and trl")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    COLOSSAL_CHECK(o.rounds >= 2 && o.steps >= 2, "[bench_post_training] --rounds and --steps must be >= 2: the first "
                   "is not timed");
    const std::string bin = here(), env = "OMP_NUM_THREADS=" + std::to_string(o.threads) + " ";
    colossal::fs::make_dirs(o.work);
    const std::string base = make_base(o, bin, env);
    if (o.part != "grpo") bench_dpo(o, base, bin, env);
    if (o.part != "dpo") bench_grpo_rollout(o, base, env);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_post_training: %s\n", e.what());
    return 1;
  }
  return 0;
}
