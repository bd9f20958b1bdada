// bench_post_training: DPO steps of train_llama --mode dpo beside TRL's DPOTrainer on the same
// model directory, pairs, batch, learning rate and steps, on the CPU, in one run.
//
//   build/apps/bench_post_training [--hidden 512 --layers 8] [--batch 4] [--steps 8] [--threads 2]
//
// A base model is made once under --work (train_llama's tokenizer and one step of training, saved
// as a Hugging Face directory), with the built-in preference pairs (llama::write_preference_pairs).
// Both sides precompute the reference log-probabilities before training (TRL:
// precompute_ref_log_probs) and report the median step after the first; peak memory is each
// process's maximum resident set (/usr/bin/time). Goal: ours >= 1.3x TRL's pairs per second.
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/common/check.h"
#include "core/common/fs.h"
#include "llama/corpus.h"
#include "llama/preference_data.h"
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

}  // namespace

int main(int argc, char** argv) {
  int64_t hidden = 512, layers = 8, heads = 8, batch = 4, steps = 8, threads = 2, max_length = 128;
  std::string work = "/tmp/bench_post_training", python = COLOSSAL_DEFAULT_PYTHON;
  CLI::App app{"DPO steps: train_llama --mode dpo beside TRL's DPOTrainer"};
  app.add_option("--hidden", hidden, "the model's hidden size (intermediate 8/3 of it)")->capture_default_str();
  app.add_option("--layers", layers, "decoder layers")->capture_default_str();
  app.add_option("--heads", heads, "attention heads (half as many key/value heads)")->capture_default_str();
  app.add_option("--batch", batch, "pairs per step")->capture_default_str();
  app.add_option("--steps", steps, "steps (the first is not timed)")->capture_default_str();
  app.add_option("--threads", threads, "threads of each side")->capture_default_str();
  app.add_option("--max_length", max_length, "tokens per sequence at most")->capture_default_str();
  app.add_option("--work", work, "where the base model, pairs and logs go")->capture_default_str();
  app.add_option("--python", python, "Python with torch and trl")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const std::string bin = here(), env = "OMP_NUM_THREADS=" + std::to_string(threads) + " ";
    colossal::fs::make_dirs(work);
    const std::string shape = "h" + std::to_string(hidden) + "-l" + std::to_string(layers);
    const std::string base = work + "/base-" + shape;
    if (!exists(base + "/model/config.json")) {
      nlohmann::json config = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"},
                               {"hidden_size", hidden}, {"intermediate_size", (hidden * 8 / 3 + 63) / 64 * 64},
                               {"num_hidden_layers", layers}, {"num_attention_heads", heads},
                               {"num_key_value_heads", std::max<int64_t>(1, heads / 2)},
                               {"max_position_embeddings", max_length}, {"rms_norm_eps", 1e-5},
                               {"vocab_size", 4000}};  // replaced by the tokenizer's
      std::ofstream(work + "/" + shape + ".json") << config.dump(2);
      run("the base model (" + shape + ")",
          env + bin + "/train_llama --model_config " + work + "/" + shape + ".json --output " + base +
              " --max_steps 1 --batch_size 1 --max_length " + std::to_string(max_length) +
              " --eval_interval -1 --sample_tokens 0 --load_checkpoint none > " + work + "/base.log 2>&1");
    }
    const std::string pairs = work + "/pairs.jsonl";
    if (!exists(pairs)) colossal::llama::write_preference_pairs(base + "/data/train.jsonl", pairs);
    const auto tokenizer = colossal::llama::load_tokenizer(base + "/model");
    colossal::llama::PreferenceDataOptions o;
    o.files = {pairs};
    o.max_length = max_length;
    const double pair_tokens = colossal::llama::PreferenceDataset::open(o, *tokenizer).mean_pair_tokens();

    const std::string common = " --max_length " + std::to_string(max_length) + " --lr 1e-5 --beta 0.1";
    const std::string ours_log = work + "/ours.jsonl";
    std::remove(ours_log.c_str());
    run("ours: train_llama --mode dpo",
        env + "/usr/bin/time -f %M -o " + work + "/ours.rss " + bin + "/train_llama --mode dpo --pretrained " + base +
            "/model --dataset " + pairs + " --output " + work + "/ours --load_checkpoint none --max_steps " +
            std::to_string(steps) + " --batch_size " + std::to_string(batch) + common +
            " --warmup_steps 0 --eval_interval -1 --log_interval 1 --sample_tokens 0 --log_file " + ours_log +
            " > " + work + "/ours.log 2>&1");
    std::vector<double> rates;
    std::ifstream in(ours_log);
    for (std::string line; std::getline(in, line);) {
      auto js = nlohmann::json::parse(line, nullptr, false);
      if (js.is_object() && js.contains("tokens/s") && js.value("step", 0) > 1) rates.push_back(js["tokens/s"]);
    }
    const double ours_pairs = median(rates) / pair_tokens;
    const double ours_peak = peak_gib(work + "/ours.rss");
    run("TRL: DPOTrainer",
        env + "/usr/bin/time -f %M -o " + work + "/trl.rss '" + python + "' " + COLOSSAL_SOURCE_DIR +
            "/apps/bench/dpo_trl_reference.py --model " + base + "/model --pairs " + pairs + " --out " + work +
            "/trl --batch " + std::to_string(batch) + " --steps " + std::to_string(steps) + " --threads " +
            std::to_string(threads) + " --max_length " + std::to_string(max_length) + " > " + work +
            "/trl.log 2>&1");
    std::ifstream tin(work + "/trl.log");
    nlohmann::json trl;
    for (std::string line; std::getline(tin, line);)
      if (line.rfind("{\"step_s\"", 0) == 0) trl = nlohmann::json::parse(line);
    COLOSSAL_CHECK(trl.is_object(), "[bench_post_training] TRL printed no result; see ", work, "/trl.log");
    const double trl_pairs = trl["pairs_per_s"], trl_peak = peak_gib(work + "/trl.rss");
    std::printf("\nDPO, %s (%s), batch %ld pairs (%.0f tokens per pair on average), %ld thread(s), median step "
                "after the first of %ld\n",
                shape.c_str(), base.c_str(), batch, pair_tokens, threads, steps);
    std::printf("%-28s %10s %10s %10s\n", "impl", "pairs/s", "tokens/s", "peak GiB");
    std::printf("%-28s %10.2f %10.0f %10.2f\n", "ours: train_llama --mode dpo", ours_pairs, ours_pairs * pair_tokens,
                ours_peak);
    std::printf("%-28s %10.2f %10.0f %10.2f\n", "TRL DPOTrainer", trl_pairs, trl_pairs * pair_tokens, trl_peak);
    const double ratio = ours_pairs / trl_pairs;
    std::printf("ratio ours / TRL: %.2fx pairs/s, %.2fx peak memory (goal: >= 1.3x)%s\n", ratio, ours_peak / trl_peak,
                ratio >= 1.3 ? "" : " (below goal)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_post_training: %s\n", e.what());
    return 1;
  }
  return 0;
}
