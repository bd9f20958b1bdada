// train_llama driven as a user drives it, on a slice of the built-in corpus (Jane Austen):
//   * 1 rank, 2 ranks (DDP) and 1 rank with 2 accumulation micro-batches follow the same loss
//     curve (same global batches) within relative 1e-5;
//   * a checkpoint written on 2 ranks resumes on 1 rank and continues that curve;
//   * the held-out loss falls, and the saved model directory opens in transformers with the
//     same logits.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <limits>
#include <map>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/checkpoint/safetensors.h"
#include "core/checkpoint/model_io.h"
#include "llama/corpus.h"
#include "llama/model.h"
#include "llama/pretrained.h"
#include "llama/tokenizer.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

struct Workspace {
  std::string dir, train, valid, tokenizer, model_config;
};

// A few hundred paragraphs, a 600-piece tokenizer and a tiny model: seconds per run.
const Workspace& workspace() {
  static Workspace w = [] {
    Workspace w;
    w.dir = ::testing::TempDir() + "train_llama_" + std::to_string(::getpid());
    (void)!std::system(("rm -rf '" + w.dir + "' && mkdir -p '" + w.dir + "/full'").c_str());
    write_austen_jsonl(default_austen_rdb(), w.dir + "/full");
    auto head = [&](const std::string& from, const std::string& to, int lines) {
      std::ifstream in(from);
      std::ofstream out(to);
      std::string line;
      for (int i = 0; i < lines && std::getline(in, line); ++i) out << line << '\n';
    };
    w.train = w.dir + "/train.jsonl";
    w.valid = w.dir + "/valid.jsonl";
    head(w.dir + "/full/train.jsonl", w.train, 800);
    head(w.dir + "/full/valid.jsonl", w.valid, 40);
    TrainTokenizerOptions o;
    o.vocab_size = 600;
    train_tokenizer({w.train}, w.dir + "/tok", o);
    w.tokenizer = w.dir + "/tok.model";
    w.model_config = w.dir + "/config.json";
    std::ofstream(w.model_config) << R"({"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "vocab_size": 600})";
    return w;
  }();
  return w;
}

struct Launch {
  int rc = 0;
  std::string command, output;
};

// Runs train_llama (on `ranks` processes through `colossal run`, or through `launcher` when
// given: "colossal verify ... --") on the workspace's data.
Launch launch(const std::string& name, int ranks, const std::string& flags, const std::string& eval_dataset = "",
              const std::string& launcher = "") {
  const auto& w = workspace();
  std::string out = w.dir + "/" + name;
  std::string log = out + ".jsonl";
  (void)!std::system(("rm -rf '" + out + "' '" + log + "'").c_str());
  std::string bin = testing::binary_dir();
  std::string prefix = !launcher.empty() ? launcher + " "
                       : ranks > 1    ? bin + "/colossal run --nproc_per_node " + std::to_string(ranks) + " -- "
                                      : "";
  // A run from --pretrained takes its shape from there.
  const bool pretrained = flags.find("--pretrained") != std::string::npos;
  const bool own_config = pretrained || flags.find("--model_config ") != std::string::npos;
  std::string cmd = prefix + bin + "/train_llama --dataset " + w.train + " --eval_dataset " +
                    (eval_dataset.empty() ? w.valid : eval_dataset) +
                    " --tokenizer " + w.tokenizer + (own_config ? "" : " --model_config " + w.model_config) +
                    " --max_length 64" + (flags.find("--lr ") == std::string::npos ? " --lr 3e-3" : "") +
                    (flags.find("--warmup_steps ") == std::string::npos ? " --warmup_steps 2" : "") +
                    " --sample_tokens 0 --log_interval 1 --output " + out +
                    " --log_file " + log + " " + flags + " > " + out + ".out 2>&1";
  Launch run{std::system(cmd.c_str()), cmd, ""};
  std::ifstream so(out + ".out");
  run.output.assign(std::istreambuf_iterator<char>(so), std::istreambuf_iterator<char>());
  return run;
}

// The same, expected to succeed; returns its JSON log lines.
std::vector<nlohmann::json> train(const std::string& name, int ranks, const std::string& flags) {
  const auto run = launch(name, ranks, flags);
  EXPECT_EQ(run.rc, 0) << run.command << "\n" << run.output;
  const std::string log = workspace().dir + "/" + name + ".jsonl";
  std::vector<nlohmann::json> lines;
  std::ifstream in(log);
  std::string line;
  while (std::getline(in, line)) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

std::map<int64_t, double> losses(const std::vector<nlohmann::json>& log) {
  std::map<int64_t, double> out;
  for (const auto& j : log)
    if (!j.contains("event")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  return out;
}

std::vector<double> eval_losses(const std::vector<nlohmann::json>& log) {
  std::vector<double> out;
  for (const auto& j : log)
    if (j.value("event", "") == "eval") out.push_back(j["loss"].get<double>());
  return out;
}

void expect_same_curve(const std::map<int64_t, double>& ref, const std::map<int64_t, double>& got,
                       const std::string& what) {
  ASSERT_FALSE(got.empty()) << what;
  for (const auto& [step, loss] : got) {
    ASSERT_TRUE(ref.count(step)) << what << ": step " << step;
    EXPECT_NEAR(loss, ref.at(step), 1e-5 * std::fabs(ref.at(step))) << what << " at step " << step;
  }
}

TEST(TrainLlama, RanksAccumulationAndResumeFollowTheSingleProcessCurve) {
  auto one = losses(train("one", 1, "--batch_size 4 --max_steps 4 --eval_interval 0"));
  ASSERT_EQ(one.size(), 4u);
  expect_same_curve(one, losses(train("two", 2, "--batch_size 2 --max_steps 4 --eval_interval 0 --save_interval 2")),
                    "2 ranks (DDP)");
  expect_same_curve(one, losses(train("accum", 1, "--batch_size 2 --accumulation_steps 2 --max_steps 4 --eval_interval 0")),
                    "1 rank, 2 micro-batches");
  // The 2-rank run's step-2 checkpoint, continued on one process: steps 3 and 4 as before.
  const auto& w = workspace();
  auto resumed = losses(train("resumed", 1, "--batch_size 4 --max_steps 4 --eval_interval 0 --load_checkpoint " +
                                                w.dir + "/two/checkpoints/step-2"));
  EXPECT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed.begin()->first, 3);
  expect_same_curve(one, resumed, "resumed on 1 rank from a 2-rank checkpoint");
}

// Gemini with every chunk's optimizer state streamed from NVMe follows the same run without
// offload, and the offload files are gone afterwards (unlinked once opened).
// The tools of a run: --memory_trace writes the traced step's phases and modules, the
// communication profiler one line per step per rank, and colossal plot charts the log.
TEST(TrainLlama, MemoryTraceCommProfileAndPlot) {
  const auto& w = workspace();
  const std::string comm = w.dir + "/comm", trace = w.dir + "/tools_trace.json";
  const std::string bin = testing::binary_dir();
  const auto run = launch("tools", 2, "--max_steps 3 --memory_trace " + trace, "",
                          "env COLOSSAL_COMM_PROFILE=" + comm + " " + bin + "/colossal run --nproc_per_node 2 --");
  ASSERT_EQ(run.rc, 0) << run.output;
  std::ifstream t(trace);
  ASSERT_TRUE(t.good()) << run.output;
  auto j = nlohmann::json::parse(t);
  EXPECT_EQ(j["step"], 2);
  std::set<std::string> modules;
  for (const auto& m : j["modules"]) modules.insert(m["module"].get<std::string>());
  for (const char* name : {"embed_tokens", "layers.0", "layers.1", "lm_head"}) EXPECT_TRUE(modules.count(name)) << name;
  EXPECT_GT(j["totals"]["model_data_bytes"].get<int64_t>(), 0) << j.dump();
  EXPECT_GE(j["totals"]["start_bytes"].get<int64_t>(), j["totals"]["model_data_bytes"].get<int64_t>())
      << "the meter counts from the start: the model's state is held when the step begins";
  EXPECT_NE(run.output.find("communication per step"), std::string::npos) << run.output;
  for (int r = 0; r < 2; ++r) {
    std::ifstream in(comm + "/comm_rank" + std::to_string(r) + ".jsonl");
    std::string line;
    int lines = 0;
    int64_t reduced = 0;
    while (std::getline(in, line)) {
      ++lines;
      const auto step = nlohmann::json::parse(line);
      for (const auto& c : step["collectives"])
        if (c["op"] == "all_reduce") reduced += c["bytes"].get<int64_t>();
    }
    EXPECT_EQ(lines, 3) << "rank " << r;
    EXPECT_GT(reduced, 0) << "rank " << r;
  }
  const std::string plots = w.dir + "/tools_plots";
  const std::string cmd = bin + "/colossal plot " + w.dir + "/tools.jsonl --out " + plots + " --metrics loss lr > " +
                          w.dir + "/plot.out 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  for (const char* png : {"loss.png", "lr.png"}) {
    std::ifstream f(plots + "/" + png, std::ios::binary);
    char magic[4] = {};
    f.read(magic, 4);
    EXPECT_EQ(std::string(magic + 1, 3), "PNG") << png;
  }
  // A metric the log lacks is named with the ones it has; nothing asked for existing is an error.
  const std::string bad = bin + "/colossal plot " + w.dir + "/tools.jsonl --out " + plots + " --metrics nope > " +
                          w.dir + "/plot_bad.out 2>&1";
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::ifstream bo(w.dir + "/plot_bad.out");
  std::string out((std::istreambuf_iterator<char>(bo)), std::istreambuf_iterator<char>());
  EXPECT_NE(out.find("no 'nope'"), std::string::npos) << out;
  EXPECT_NE(out.find("loss"), std::string::npos) << out;
}

// --plugin auto on 2 ranks: the search runs, reports every candidate, and the run trains with the
// chosen layout.
TEST(TrainLlama, PluginAutoChoosesByMeasurementAndTrains) {
  const auto& w = workspace();
  const std::string report = w.dir + "/auto_report.json";
  const auto run = launch("auto", 2, "--plugin auto --max_steps 2 --batch_size 2 --auto_trials 2 --auto_report " + report);
  ASSERT_EQ(run.rc, 0) << run.output;
  EXPECT_NE(run.output.find("--plugin auto: "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("<- chosen"), std::string::npos) << run.output;
  std::ifstream in(report);
  ASSERT_TRUE(in.good()) << run.output;
  auto j = nlohmann::json::parse(in);
  ASSERT_TRUE(j["chosen"].is_string()) << j.dump(2);
  int measured = 0, pure_dp_measured = 0;  // pure dp: plain DDP, the baseline
  for (const auto& c : j["candidates"]) {
    EXPECT_GT(c["predicted_s"].get<double>(), 0) << c.dump();
    EXPECT_EQ(c["dp"].get<int>() * c["tp"].get<int>() * c["pp"].get<int>() * c["sp"].get<int>(), 2) << c.dump();
    if (c.contains("measured_s")) {
      ++measured;
      if (c["plugin"] == "ddp" && !c["activation_checkpointing"].get<bool>()) ++pure_dp_measured;
    }
  }
  EXPECT_EQ(measured, 2) << j.dump(2);
  EXPECT_EQ(pure_dp_measured, 1) << "plain DDP, the baseline, is always among the trials";
  // The run itself used the chosen layout's plugin.
  const std::string chosen = j["chosen"];
  const std::string plugin = chosen.substr(0, chosen.find(' '));
  EXPECT_NE(run.output.find("plugin " + plugin), std::string::npos) << chosen << "\n" << run.output;
  std::vector<nlohmann::json> log;
  std::ifstream lf(w.dir + "/auto.jsonl");
  for (std::string line; std::getline(lf, line);) log.push_back(nlohmann::json::parse(line));
  EXPECT_EQ(losses(log).size(), 2u);
}

TEST(TrainLlama, GeminiNvmeOffloadFollowsTheRunWithoutOffload) {
  const auto& w = workspace();
  const std::string nvme = w.dir + "/nvme";
  std::filesystem::create_directories(nvme);
  const std::string flags = "--plugin gemini --batch_size 2 --max_steps 4 --eval_interval 0 ";
  auto plain = losses(train("gemini", 2, flags));
  ASSERT_EQ(plain.size(), 4u);
  auto offloaded = losses(train("gemini_nvme", 2, flags + "--offload_optim_frac 1 --offload_device nvme --nvme_dir " + nvme));
  expect_same_curve(plain, offloaded, "gemini with optimizer state on NVMe");
  EXPECT_TRUE(std::filesystem::is_empty(nvme)) << nvme << " still holds files";
  // The same through a config file: the plugin's options by the same names.
  std::ofstream(w.dir + "/gemini.yaml") << "plugin: gemini\noffload_optim_frac: 1\noffload_device: nvme\nnvme_dir: "
                                        << nvme << "\nbatch_size: 2\nmax_steps: 4\neval_interval: 0\n";
  expect_same_curve(plain, losses(train("gemini_yaml", 2, "--config " + w.dir + "/gemini.yaml")),
                    "gemini with NVMe offload from a YAML file");
  EXPECT_TRUE(std::filesystem::is_empty(nvme));
}

// --pretrained loads lazily: under Gemini on 2 ranks each weight goes from the saved files
// straight into its shard, and the first evaluation sees exactly the saved model.
TEST(TrainLlama, PretrainedLoadsStraightIntoGeminiShards) {
  const auto& w = workspace();
  auto first = train("pre_a", 1, "--batch_size 4 --max_steps 3 --eval_interval 0");
  auto saved = eval_losses(first);
  ASSERT_FALSE(saved.empty());
  auto second = train("pre_b", 2, "--plugin gemini --batch_size 2 --max_steps 1 --eval_interval 0 --pretrained " +
                                      w.dir + "/pre_a/model");
  auto evals = eval_losses(second);
  ASSERT_FALSE(evals.empty());
  EXPECT_NEAR(evals.front(), saved.back(), 1e-5 * saved.back()) << "the loaded model's first evaluation";
}

// --plugin hybrid against the same single-process curve: tp 2 x dp 2 (half the batch per
// replica) and tp 2 x sp 2 (ring_attn, one replica with the whole batch), then a checkpoint of
// the tp x dp run resumed with the same layout.
TEST(TrainLlama, HybridPluginFollowsTheSingleProcessCurve) {
  const auto one_log = train("ref_hybrid", 1, "--batch_size 4 --max_steps 4 --eval_interval 0");
  const auto one = losses(one_log);
  ASSERT_EQ(one.size(), 4u);
  expect_same_curve(one, losses(train("tp_dp", 4, "--plugin hybrid --tp 2 --zero_stage 2 --batch_size 2 --max_steps 4 "
                                                  "--eval_interval 2 --save_interval 2")),
                    "tp 2 x dp 2, ZeRO-2");
  expect_same_curve(one, losses(train("tp_sp", 4, "--plugin hybrid --tp 2 --sp 2 --sp_mode ring_attn --batch_size 4 "
                                                  "--max_steps 4 --eval_interval 0")),
                    "tp 2 x sp 2 (ring_attn)");
  const auto& w = workspace();
  auto resumed = losses(train("tp_dp_resumed", 4, "--plugin hybrid --tp 2 --zero_stage 2 --batch_size 2 --max_steps 4 "
                                                  "--eval_interval 0 --load_checkpoint " + w.dir + "/tp_dp/checkpoints/step-2"));
  EXPECT_EQ(resumed.size(), 2u);
  expect_same_curve(one, resumed, "tp 2 x dp 2 resumed at step 2");
  // 2D and 3D grids, 2D under pipeline stages; the 2D run's checkpoint resumes at 1d (tp 2 x dp 2)
  // and on one process.
  expect_same_curve(one, losses(train("tp_2d", 4, "--plugin hybrid --tp 4 --tp_mode 2d --batch_size 4 --max_steps 4 "
                                                  "--eval_interval 2 --save_interval 2")),
                    "tp 4 (2d)");
  expect_same_curve(one, losses(train("tp_3d", 8, "--plugin hybrid --tp 8 --tp_mode 3d --batch_size 4 --max_steps 4 "
                                                  "--eval_interval 0")),
                    "tp 8 (3d)");
  // Pipeline stages of 2d grids: each stage's grid sends its blocks to the same grid rank of the
  // next stage, and evaluation runs microbatches of the grid's rows (padded at the end).
  const auto pp_2d = train("pp_2d", 8, "--plugin hybrid --pp 2 --tp 4 --tp_mode 2d --num_microbatches 2 "
                                       "--batch_size 4 --max_steps 4 --eval_interval 0");
  expect_same_curve(one, losses(pp_2d), "pp 2 x tp 4 (2d)");
  const auto want_eval = eval_losses(one_log), got_eval = eval_losses(pp_2d);
  ASSERT_EQ(got_eval.size(), want_eval.size());
  ASSERT_FALSE(got_eval.empty());
  for (size_t k = 0; k < got_eval.size(); ++k)
    EXPECT_NEAR(got_eval[k], want_eval[k], 1e-5 * want_eval[k]) << "pp 2 x tp 4 (2d) evaluation " << k;
  const std::string grid_step2 = " --load_checkpoint " + w.dir + "/tp_2d/checkpoints/step-2";
  auto at_1d = losses(train("tp_2d_at_1d", 4, "--plugin hybrid --tp 2 --zero_stage 2 --batch_size 2 --max_steps 4 "
                                              "--eval_interval 0" + grid_step2));
  EXPECT_EQ(at_1d.size(), 2u);
  expect_same_curve(one, at_1d, "the 2d run's step-2 checkpoint resumed at tp 2 x dp 2");
  auto at_one = losses(train("tp_2d_at_one", 1, "--batch_size 4 --max_steps 4 --eval_interval 0" + grid_step2));
  EXPECT_EQ(at_one.size(), 2u);
  expect_same_curve(one, at_one, "the 2d run's step-2 checkpoint resumed on one process");
}

// --mixed_precision fp8: the linear layers' products in e4m3 (forward) and e5m2 (gradients),
// the rest as bf16 with fp32 masters. The loss follows the bf16 run's within the formats'
// rounding (measured on Zen 3: 0.05% apart at most with current scaling, 0.12% delayed; held to
// 1%), is not the bf16 run itself, and falls. A plugin that cannot run it says so.
TEST(TrainLlama, Fp8FollowsTheBf16Run) {
  const std::string common = "--plugin ddp --batch_size 4 --max_steps 12 --eval_interval 0 ";
  auto bf16 = losses(train("bf16", 1, common + "--mixed_precision bf16"));
  ASSERT_EQ(bf16.size(), 12u);
  for (const char* scaling : {"current", "delayed"}) {
    auto fp8 = losses(train(std::string("fp8_") + scaling, 1,
                            common + "--mixed_precision fp8 --fp8_scaling " + scaling));
    ASSERT_EQ(fp8.size(), bf16.size()) << scaling;
    double largest = 0;
    for (const auto& [step, loss] : fp8) largest = std::max(largest, std::fabs(loss - bf16.at(step)) / bf16.at(step));
    std::printf("[fp8] %s scaling: largest relative loss difference from bf16 over %zu steps: %.4f\n", scaling,
                fp8.size(), largest);
    EXPECT_LT(largest, 0.01) << scaling << " scaling: FP8 drifted from bf16";
    EXPECT_GT(largest, 0.0) << scaling << " scaling: identical to bf16, so nothing ran in FP8";
    EXPECT_LT(fp8.rbegin()->second, fp8.begin()->second - 0.5) << scaling << " scaling: the loss did not fall";
  }
  // On a 2d grid (4 ranks, one replica): the gathered blocks' products in FP8, against the same
  // bf16 curve (the 1d run's per-tensor scales become per-block scales).
  auto grid = losses(train("fp8_2d", 4, "--plugin hybrid --tp 4 --tp_mode 2d --batch_size 4 --max_steps 12 "
                                        "--eval_interval 0 --mixed_precision fp8"));
  ASSERT_EQ(grid.size(), bf16.size());
  double grid_largest = 0;
  for (const auto& [step, loss] : grid)
    grid_largest = std::max(grid_largest, std::fabs(loss - bf16.at(step)) / bf16.at(step));
  std::printf("[fp8] 2d grid: largest relative loss difference from bf16: %.4f\n", grid_largest);
  EXPECT_LT(grid_largest, 0.01);
  EXPECT_GT(grid_largest, 0.0);
  const auto gemini = launch("fp8_gemini", 1, "--plugin gemini --mixed_precision fp8 --max_steps 1");
  EXPECT_NE(gemini.rc, 0);
  EXPECT_NE(gemini.output.find("--mixed_precision fp8 runs under the ddp, zero1/zero2 and hybrid plugins"),
            std::string::npos) << gemini.output;
}

// --fp8_communication: pp 2 x sp 2 (Ulysses), the activations and gradients between the stages
// and through the all-to-alls in FP8. The loss follows the exact run within 2% (FP8's rounding,
// 2^-4 relative per exchanged value), and the profiler's per-step bytes are a quarter of fp32's
// plus the scales: exactly so for the pipeline's messages (one header, then FP8 tokens of the
// hidden size 64 with a 4-byte scale each; the all-to-alls' vectors are heads of 16).
// fp32, so the figures hold on every CPU (bf16 falls back to fp32 compute where the CPU has no
// bf16 units); that bf16 halves is MultiRankFp8Payload's.
TEST(TrainLlama, Fp8CommunicationFollowsTheExactRunWithAQuarterOfTheBytes) {
  const std::string layout = "--plugin hybrid --pp 2 --sp 2 --sp_mode all_to_all --num_microbatches 2 "
                             "--batch_size 4 --max_steps 6 --eval_interval 0";
  struct Totals {
    int64_t calls = 0, bytes = 0;
  };
  // Per "group op" ("pp send", "sp all_to_all"): rank 0's last step.
  auto profiled = [&](const std::string& name, const std::string& flags) {
    const std::string dir = workspace().dir + "/" + name + "_comm";
    (void)!std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
    setenv("COLOSSAL_COMM_PROFILE", dir.c_str(), 1);
    auto log = train(name, 4, flags);
    unsetenv("COLOSSAL_COMM_PROFILE");
    std::ifstream in(dir + "/comm_rank0.jsonl");
    std::string line, last;
    while (std::getline(in, line)) last = line;
    std::map<std::string, Totals> totals;
    const auto step = last.empty() ? nlohmann::json::object() : nlohmann::json::parse(last);
    if (step.contains("collectives"))
      for (const auto& c : step["collectives"]) {
        auto& t = totals[c["group"].get<std::string>() + " " + c["op"].get<std::string>()];
        t.calls += c["calls"].get<int64_t>();
        t.bytes += c["bytes"].get<int64_t>();
      }
    return std::make_pair(losses(log), totals);
  };
  const auto [exact, exact_bytes] = profiled("comm_exact", layout);
  const auto [fp8, fp8_bytes] = profiled("comm_fp8", layout + " --fp8_communication");
  ASSERT_EQ(exact.size(), 6u);
  ASSERT_EQ(fp8.size(), exact.size());
  double largest = 0;
  for (const auto& [step, loss] : fp8) largest = std::max(largest, std::fabs(loss - exact.at(step)) / exact.at(step));
  std::printf("[fp8 communication] largest relative loss difference from the exact run: %.4f\n", largest);
  EXPECT_LT(largest, 0.02);
  EXPECT_GT(largest, 0.0) << "identical to the exact run: nothing travelled in FP8";
  for (const char* op : {"sp all_to_all", "pp send", "pp recv"}) {
    ASSERT_TRUE(exact_bytes.count(op) && fp8_bytes.count(op)) << op;
    const auto& e = exact_bytes.at(op);
    const auto& f = fp8_bytes.at(op);
    const double ratio = static_cast<double>(f.bytes) / e.bytes;
    std::printf("[fp8 communication] %s: %lld bytes per step in fp32, %lld in FP8 (%.3f)\n", op,
                static_cast<long long>(e.bytes), static_cast<long long>(f.bytes), ratio);
    ASSERT_EQ(f.calls, e.calls) << op;
    if (std::string(op) == "sp all_to_all") {
      // Ulysses moves heads: vectors of the head size 16 (64 / 4 heads), each with its scale.
      const int64_t values = e.bytes / 4;
      EXPECT_EQ(f.bytes, values + 4 * values / 16) << op;
    } else {
      // One 80-byte header (dtype, rank, 8 sizes) and calls - 1 messages of n fp32 values each, n / 64
      // tokens of the workspace model's hidden size.
      const int64_t messages = e.calls - 1, values = (e.bytes - 80) / messages / 4;
      EXPECT_EQ(f.bytes, 80 + messages * (values + 4 * values / 64)) << op;
    }
  }
  const auto ddp = launch("fp8_comm_ddp", 1, "--plugin ddp --fp8_communication --max_steps 1");
  EXPECT_NE(ddp.rc, 0);
  EXPECT_NE(ddp.output.find("--fp8_communication compresses the activations"), std::string::npos) << ddp.output;
}

// Mixtral from the command line: --plugin hybrid --ep 2 (DDP, and ZeRO-2 with the experts
// sharded over their own replicas; and pp 2 x ep 2) follows one process, and the log carries the router
// statistics (tokens per expert summed over the replicas: the same routing as one process).
// The load-balancing loss is off here: it is a statistic of each forward's tokens, which the
// sampler groups differently on 1 and 2 ranks (tests/llama/moe_test.cpp checks it per replica).
TEST(TrainLlama, MixtralUnderExpertParallelismFollowsTheSingleProcessCurve) {
  const auto& w = workspace();
  const std::string cfg = w.dir + "/mixtral.json";
  std::ofstream(cfg) << R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "vocab_size": 600,
    "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0, "router_z_loss_coef": 0.001})";
  auto one = train("ref_moe", 1, "--model_config " + cfg + " --batch_size 4 --max_steps 3 --eval_interval 0");
  ASSERT_EQ(losses(one).size(), 3u);
  for (const char* zero : {"0", "2"}) {
    auto ep = train(std::string("moe_ep2_zero") + zero, 2, "--model_config " + cfg + " --plugin hybrid --ep 2 --zero_stage " +
                                                              zero + " --batch_size 2 --max_steps 3 --eval_interval 0");
    expect_same_curve(losses(one), losses(ep), std::string("ep 2, zero_stage ") + zero);
    auto step_one = [](const std::vector<nlohmann::json>& log) {
      for (const auto& j : log)
        if (!j.contains("event") && j["step"] == 1) return j;
      return nlohmann::json::object();
    };
    const auto first = step_one(ep);
    ASSERT_TRUE(first.contains("tokens_per_expert")) << first.dump();
    EXPECT_EQ(first["tokens_per_expert"], step_one(one)["tokens_per_expert"]) << "step 1's routing, all replicas";
    double routed = 0;
    for (double t : first["tokens_per_expert"].get<std::vector<double>>()) routed += t;
    EXPECT_EQ(routed, 4 * 64 * 2 * 2) << "4 samples x 64 tokens x top 2 x 2 layers";
    EXPECT_GE(first["load_max"].get<double>(), 1.0);
    EXPECT_TRUE(first.contains("aux_loss"));
  }
  // pp 2 x ep 2 (dp 2): the statistics travel with the activations and are reported over the
  // stages and replicas.
  auto pp = train("moe_pp2_ep2", 4, "--model_config " + cfg + " --plugin hybrid --pp 2 --ep 2 --batch_size 2 "
                                    "--max_steps 3 --eval_interval 0");
  expect_same_curve(losses(one), losses(pp), "pp 2 x ep 2");
  for (const auto& j : pp)
    if (!j.contains("event") && j["step"] == 1) {
      for (const auto& k : one)
        if (!k.contains("event") && k["step"] == 1) EXPECT_EQ(j["tokens_per_expert"], k["tokens_per_expert"]);
    }
}

// Pipeline parallelism from the command line: pp 2 x dp 2 (1f1b, with evaluation and a
// checkpoint under the pipeline) and zbh1 follow one process; the pp 2 x dp 2 checkpoint resumes
// on one process. (The test model has 2 layers: 2 stages of one layer.)
TEST(TrainLlama, PipelineFollowsTheSingleProcessCurve) {
  auto one = losses(train("ref_hybrid", 1, "--batch_size 4 --max_steps 4 --eval_interval 0"));
  ASSERT_EQ(one.size(), 4u);
  expect_same_curve(one, losses(train("pp_dp", 4, "--plugin hybrid --pp 2 --num_microbatches 2 --batch_size 2 "
                                                  "--max_steps 4 --eval_interval 2 --save_interval 2")),
                    "pp 2 x dp 2, 1f1b");
  expect_same_curve(one, losses(train("pp_zbh1", 2, "--plugin hybrid --pp 2 --pp_schedule zbh1 --microbatch_size 1 "
                                                    "--batch_size 4 --max_steps 4 --eval_interval 0")),
                    "pp 2, zbh1, 4 microbatches of 1");
  const auto& w = workspace();
  auto resumed = losses(train("pp_resumed", 1, "--batch_size 4 --max_steps 4 --eval_interval 0 --load_checkpoint " +
                                                   w.dir + "/pp_dp/checkpoints/step-2"));
  EXPECT_EQ(resumed.size(), 2u);
  expect_same_curve(one, resumed, "pp 2 x dp 2 resumed at step 2 on one process");
}

// Greedy generation through the inference engine with the weights split over 2 and 4 ranks
// (4: fewer kv heads than ranks) prints what one process prints. The model is untrained with
// wide weights, so its logits are far apart and its output varied.
// An evaluation set too short for one sample is named before training, never scored as a
// perfect loss 0 / perplexity 1.
TEST(TrainLlama, AnEvaluationSetShorterThanOneSampleIsAnError) {
  const std::string tiny = workspace().dir + "/tiny_valid.jsonl";
  std::ofstream(tiny) << "{\"text\": \"Yes.\"}\n";
  const auto run = launch("tiny_eval", 1, "--max_steps 1", tiny);
  EXPECT_NE(run.rc, 0) << run.output;
  EXPECT_NE(run.output.find("--eval_dataset " + tiny + ": "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("fewer than one sample of --max_length 64"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("perplexity 1"), std::string::npos) << run.output;
}

// train_llama's flags out of range are refused before anything runs, naming the flag and value.
TEST(TrainLlama, TrainLlamaRefusesFlagsOutOfRange) {
  const std::string bin = testing::binary_dir();
  const std::string out = workspace().dir + "/train_flags.txt";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--batch_size 0", "--batch_size: expected >= 1, got 0"},
      {"--max_steps -5", "--max_steps: expected >= 0, got -5"},
      {"--keep_checkpoints -1", "--keep_checkpoints: expected >= 0, got -1"},
      {"--save_interval -1", "--save_interval: expected >= 0, got -1"},
      {"--mode rl", "--mode: expected pretrain, sft, dpo, rm or grpo, got 'rl'"},
      {"--log_interval 0", "--log_interval: expected >= 1, got 0"},
      {"--vocab_size 10", "--vocab_size: expected >= 260"},
      {"--load_checkpoint " + workspace().dir + "/no_such_checkpoint", "no checkpoint at '"},
  };
  for (const auto& [flags, message] : cases) {
    const auto& w = workspace();
    const std::string cmd = bin + "/train_llama --output " + w.dir + "/flags_out --dataset " + w.train +
                            " --tokenizer " + w.tokenizer + " --model_config " + w.model_config + " --max_length 64 " +
                            (flags.find("--max_steps") == std::string::npos ? "--max_steps 1 " : "") + flags + " > " +
                            out + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(out);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(rc, 0) << flags << "\n" << text;
    EXPECT_NE(text.find(message), std::string::npos) << flags << "\n" << text;
  }
}

// Flags out of range are refused up front with the flag, the value and the range (they once
// crashed with SIGFPE, aborted after 10 s, spun up thousands of threads or listened elsewhere).
TEST(TrainLlama, InferLlamaRefusesFlagsOutOfRange) {
  const std::string bin = testing::binary_dir();
  const std::string out = workspace().dir + "/infer_flags.txt";
  auto run = [&](const std::string& flags) {
    const std::string cmd = bin + "/infer_llama --prompt hi " + flags + " > " + out + " 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(out);
    return std::pair{rc, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())};
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--block_size 0", "--block_size: expected in [1, 4096], got 0"},
      {"--block_size -16", "--block_size: expected in [1, 4096], got -16"},
      {"--threads 100000", "--threads: expected in [0, "},
      {"--dtype fp64", "--dtype: expected fp32, bf16, fp16, int8 or int4, got 'fp64'"},
      {"--port 70000", "--port: Value 70000 not in range 1 to 65535"},
      {"--top_p 1.5", "--top_p: Value 1.5 not in range"},
      {"--kv_cache_mib 100000000", "--kv_cache_mib 100000000 (97656.2 GiB) is more than this machine's available memory"},
  };
  for (const auto& [flags, message] : cases) {
    const auto [rc, text] = run(flags);
    EXPECT_NE(rc, 0) << flags << "\n" << text;
    EXPECT_NE(text.find(message), std::string::npos) << flags << "\n" << text;
  }
}

// A diverging run (a learning rate of 1e30: the loss stays finite, the gradients turn NaN) stops
// on every rank at that step, names it, and writes no model: the earlier checkpoints stay the
// last ones, and they hold finite weights.
TEST(TrainLlama, NaNGradientsStopTheRunBeforeTheyReachACheckpoint) {
  const auto run = launch("diverge", 2, "--max_steps 8 --lr 1e30 --warmup_steps 0 --save_interval 1");
  EXPECT_NE(run.rc, 0) << run.output;
  EXPECT_NE(run.output.find("the gradient norm is NaN"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("stopped before the optimizer step"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("saved: "), std::string::npos) << run.output;
  const std::string out = workspace().dir + "/diverge";
  EXPECT_FALSE(std::filesystem::exists(out + "/model/model.safetensors")) << run.output;
  // Whatever step checkpoints exist hold finite weights (loading verifies that).
  for (const auto& entry : std::filesystem::directory_iterator(out + "/checkpoints")) {
    if (!std::filesystem::exists(entry.path() / "model")) continue;
    checkpoint::CheckpointReader reader((entry.path() / "model").string());
    for (const auto& name : reader.names()) EXPECT_NO_THROW(reader.view(name)) << entry.path() << " " << name;
  }
}

// A model directory whose weights hold NaN (written elsewhere, without checksums), or whose file
// has a flipped byte, is refused by infer_llama with the file and the tensor, not served as "⁇".
TEST(TrainLlama, InferLlamaRefusesNonFiniteOrDamagedWeights) {
  const auto& w = workspace();
  const std::string bin = testing::binary_dir();
  auto make_model = [&](const std::string& dir) {
    torch::manual_seed(5);
    LlamaForCausalLM model(LlamaConfig::from_json_file(w.model_config));
    save_pretrained(LlamaConfig::from_json_file(w.model_config), checkpoint::model_state(*model), dir);
    (void)!std::system(("cp '" + w.tokenizer + "' '" + dir + "/tokenizer.model'").c_str());
  };
  auto infer = [&](const std::string& dir) {
    const std::string cmd = bin + "/infer_llama --model " + dir + " --max_new_tokens 4 --prompt hi > " + dir +
                            "/out.txt 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream in(dir + "/out.txt");
    return std::pair{rc, std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>())};
  };
  const std::string victim = "model.layers.1.mlp.down_proj.weight";
  // NaN in a region of one tensor, in a file rewritten the way another tool would (no checksums).
  const std::string nan_dir = w.dir + "/nan_model";
  make_model(nan_dir);
  {
    checkpoint::NamedTensors tensors;
    auto file = checkpoint::SafetensorsFile::open(nan_dir + "/model.safetensors");
    nlohmann::json header = nlohmann::json::object();
    int64_t offset = 0;
    for (const auto& info : file->tensors()) {
      auto t = file->load(info.name);
      if (info.name == victim) t.view({-1}).narrow(0, 10, 6).fill_(std::numeric_limits<float>::quiet_NaN());
      const int64_t bytes = t.numel() * t.element_size();
      header[info.name] = {{"dtype", "F32"}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
      offset += bytes;
      tensors.emplace_back(info.name, t);
    }
    file.reset();
    const std::string text = header.dump();
    std::ofstream out(nan_dir + "/model.safetensors", std::ios::binary | std::ios::trunc);
    const uint64_t len = text.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << text;
    for (const auto& [name, t] : tensors) out.write(static_cast<const char*>(t.data_ptr()), t.numel() * t.element_size());
  }
  auto [rc, text] = infer(nan_dir);
  EXPECT_NE(rc, 0) << text;
  EXPECT_NE(text.find("tensor '" + victim + "' holds 6 NaN/Inf values"), std::string::npos) << text;
  EXPECT_NE(text.find(nan_dir + "/model.safetensors"), std::string::npos) << text;
  // One flipped byte in a file we wrote.
  const std::string flip_dir = w.dir + "/flipped_model";
  make_model(flip_dir);
  int64_t at = 0;
  {
    auto file = checkpoint::SafetensorsFile::open(flip_dir + "/model.safetensors");
    at = file->find(victim)->begin + 101;
  }
  {
    std::fstream f(flip_dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    uint64_t header_len = 0;
    f.read(reinterpret_cast<char*>(&header_len), 8);
    f.seekg(static_cast<std::streamoff>(8 + header_len + at));
    const char old = static_cast<char>(f.get());
    f.seekp(static_cast<std::streamoff>(8 + header_len + at));
    f.put(static_cast<char>(old ^ 0x04));
  }
  std::tie(rc, text) = infer(flip_dir);
  EXPECT_NE(rc, 0) << text;
  EXPECT_NE(text.find("tensor '" + victim + "' does not match its checksum"), std::string::npos) << text;
}

// A rank killed mid-run under `colossal run --max_restarts 1`: the restarted ranks continue from
// the newest checkpoint by themselves (--load_checkpoint auto, the default) and end on the same
// loss as a run that was never interrupted.
TEST(TrainLlama, ARestartedJobResumesFromItsNewestCheckpoint) {
  const auto reference = losses(train("uninterrupted", 2, "--max_steps 40 --save_interval 10"));
  const auto& w = workspace();
  const std::string out = w.dir + "/restarted";
  (void)!std::system(("rm -rf '" + out + "'").c_str());
  const std::string bin = testing::binary_dir();
  const std::string train = bin + "/train_llama --dataset " + w.train + " --eval_dataset " + w.valid + " --tokenizer " +
                            w.tokenizer + " --model_config " + w.model_config +
                            " --max_length 64 --lr 3e-3 --warmup_steps 2 --sample_tokens 0 --log_interval 1"
                            " --max_steps 40 --save_interval 10 --output " + out + " --log_file " + out + ".jsonl";
  // First attempt: rank 1 is killed once a checkpoint exists (`latest` is written).
  const std::string script = "if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then (while [ ! -f " + out +
                             "/checkpoints/latest ]; do sleep 0.02; done; kill -9 $$) & fi; exec " + train;
  const std::string cmd = bin + "/colossal run --nproc_per_node 2 --max_restarts 1 -- sh -c '" + script + "' > " + out +
                          ".out 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream so(out + ".out");
  const std::string text((std::istreambuf_iterator<char>(so)), std::istreambuf_iterator<char>());
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("restarting all ranks (restart 1 of 1)"), std::string::npos) << text;
  EXPECT_NE(text.find("resumed: " + out + "/checkpoints/step-"), std::string::npos) << text;
  EXPECT_NE(text.find("(--load_checkpoint auto; --load_checkpoint none starts over)"), std::string::npos) << text;
  // The log (appended to by both attempts) ends on the uninterrupted run's losses.
  std::vector<nlohmann::json> log;
  std::ifstream in(out + ".jsonl");
  for (std::string line; std::getline(in, line);) log.push_back(nlohmann::json::parse(line));
  const auto resumed = losses(log);
  ASSERT_TRUE(resumed.count(40)) << text;
  for (int64_t step : {39, 40}) EXPECT_NEAR(resumed.at(step), reference.at(step), 1e-5 * reference.at(step)) << step;
}

TEST(TrainLlama, InferLlamaUnderTensorParallelismGeneratesTheSameTokens) {
  const auto& w = workspace();
  const std::string dir = w.dir + "/infer_tp";
  LlamaConfig c = LlamaConfig::from_json_file(w.model_config);
  c.initializer_range = 0.5;
  torch::manual_seed(3);
  LlamaForCausalLM model(c);
  save_pretrained(c, checkpoint::model_state(*model), dir);
  (void)!std::system(("cp '" + w.tokenizer + "' '" + dir + "/tokenizer.model'").c_str());
  const std::string bin = testing::binary_dir();
  auto run = [&](int tp) {
    std::string prefix = tp > 1 ? bin + "/colossal run --nproc_per_node " + std::to_string(tp) + " -- " : "";
    std::string out = dir + "/tp" + std::to_string(tp) + ".txt";
    std::string cmd = prefix + bin + "/infer_llama --model " + dir + " --tp " + std::to_string(tp) +
                      " --temperature 0 --repetition_penalty 1 --max_new_tokens 24 --prompt 'It is a truth'"
                      " --prompt 'Mr. Darcy said' > " + out + " 2>/dev/null";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    std::ifstream in(out);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // colossal run prefixes rank 0's lines with "[rank 0] "; the text is what follows.
    std::string plain;
    std::istringstream lines(text);
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("[rank 0] ", 0) == 0) line = line.substr(9);
      plain += line + "\n";
    }
    return plain;
  };
  auto one = run(1);
  EXPECT_GT(one.size(), 40u) << one;
  EXPECT_EQ(run(2), one);
  EXPECT_EQ(run(4), one);
}

const char* kLogitsScript = R"PY(
import sys, torch
from safetensors.torch import load_file, save_file
from transformers import LlamaForCausalLM
d = sys.argv[1]
ids = load_file(d + "/ids.safetensors")["ids"]
m = LlamaForCausalLM.from_pretrained(d + "/model", dtype=torch.float32).eval()
with torch.no_grad():
    save_file({"logits": m(ids).logits.contiguous()}, d + "/hf_logits.safetensors")
)PY";

const char* kTokenizerScript = R"PY(
import json, sys, torch
from transformers import AutoTokenizer, LlamaForCausalLM
d = sys.argv[1]
texts = json.load(open(d + "/texts.json"))
tok = AutoTokenizer.from_pretrained(d)
ids = [tok(t)["input_ids"] for t in texts]
back = [tok.decode(i, skip_special_tokens=True) for i in ids]
LlamaForCausalLM.from_pretrained(d, dtype=torch.float32)
json.dump({"class": type(tok).__name__, "ids": ids, "decoded": back}, open(d + "/hf_ids.json", "w"))
)PY";

// A step checkpoint's model/ holds config and tokenizer files beside the weights: infer_llama
// serves it, and transformers (without sentencepiece's protobuf) opens the model and a tokenizer
// giving our ids, BOS included. (Text that starts with a space is the one known difference:
// transformers' Metaspace adds no "▁" before a leading space, SentencePiece does; the same holds
// for Meta's LLaMA tokenizer in transformers.)
TEST(TrainLlama, EveryCheckpointOpensAsAModelWithOurTokenizerInTransformers) {
  train("steps", 1, "--batch_size 2 --max_steps 4 --save_interval 2");
  const std::string step = workspace().dir + "/steps/checkpoints/step-2/model";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors", "tokenizer.model",
                        "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}) {
    EXPECT_TRUE(std::filesystem::exists(step + "/" + f)) << step << "/" << f;
  }
  const std::string bin = testing::binary_dir();
  EXPECT_EQ(std::system((bin + "/infer_llama --model " + step + " --max_new_tokens 3 --prompt hi > /dev/null 2>&1").c_str()), 0);

  const std::vector<std::string> texts = {"It is a truth universally acknowledged, that a single man",
                                          "In 1813, 42 copies  cost 3 pounds.",
                                          "a new line\n  and two spaces after it",
                                          "na\u00efve caf\u00e9 \u2014 d\u00e9j\u00e0 vu, \u4e2d\u6587 \U0001F389"};
  std::ofstream(step + "/texts.json") << nlohmann::json(texts).dump();
  const std::string script = step + "/hf_tokenize_check.py";
  std::ofstream(script) << kTokenizerScript;
  const std::string cmd = std::string(COLOSSAL_TEST_PYTHON) + " " + script + " " + step + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(step + "/hf_ids.json");
  const auto hf = nlohmann::json::parse(in);
  EXPECT_EQ(hf["class"].get<std::string>().find("Llama"), 0u) << hf["class"];
  auto tok = Tokenizer::load(step + "/tokenizer.model");
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(hf["ids"][i].get<std::vector<int64_t>>(), tok.encode_with(texts[i], true, false)) << texts[i];
    EXPECT_EQ(hf["decoded"][i].get<std::string>(), texts[i]);
  }
}

TEST(TrainLlama, HeldOutLossFallsAndTransformersOpensTheModel) {
  auto log = train("long", 2, "--batch_size 4 --max_steps 60 --eval_interval 30");
  auto evals = eval_losses(log);
  ASSERT_EQ(evals.size(), 3u);  // before training, at step 30, at the end
  EXPECT_LT(evals.back(), evals.front() - 1.0) << "held-out loss " << evals.front() << " -> " << evals.back();
  EXPECT_LT(evals.back(), evals[1]);

  const auto& w = workspace();
  std::string d = w.dir + "/long";
  auto tok = Tokenizer::load(d + "/model/tokenizer.model");
  auto ids_vec = tok.encode_with("It is a truth universally acknowledged, that a single man", true, false);
  auto ids = torch::tensor(ids_vec, torch::kInt64).unsqueeze(0);
  checkpoint::save_safetensors(d + "/ids.safetensors", {{"ids", ids}});
  std::string script = d + "/logits.py";
  std::ofstream(script) << kLogitsScript;
  std::string cmd = std::string(COLOSSAL_TEST_PYTHON) + " " + script + " " + d + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  torch::NoGradGuard no_grad;
  auto loaded = load_pretrained(d + "/model");
  auto ours = loaded.model->forward(ids);
  auto theirs = checkpoint::SafetensorsFile::open(d + "/hf_logits.safetensors")->load("logits");
  EXPECT_TRUE(torch::allclose(ours, theirs, 1e-4, 1e-4)) << "max difference " << (ours - theirs).abs().max().item<double>();
}

// colossal verify: a layout's first steps against one process on the same global batch.
Launch verify(const std::string& name, int ranks, const std::string& flags, const std::string& env = "") {
  const std::string colossal = testing::binary_dir() + "/colossal";
  return launch(name, ranks, flags + " --batch_size 2", "",
                env + colossal + " verify --steps 2 --nproc_per_node " + std::to_string(ranks) + " --");
}

// Correct layouts pass, each gradient and parameter compared whole: sequence parallelism
// (gradients summed over sp inside DDP), pp 2 x tp 2 with ZeRO-1 (gradients gathered over tp
// and the stages, assembled from ZeRO slices) and Gemini (gradients in chunk shards).
TEST(ColossalVerify, CorrectLayoutsMatchOneProcess) {
  for (const auto& [ranks, flags] : std::vector<std::pair<int, std::string>>{
           {2, "--plugin hybrid --sp 2 --sp_mode all_to_all"},
           {4, "--plugin hybrid --pp 2 --tp 2 --zero_stage 1 --num_microbatches 2"},
           {2, "--plugin gemini"}}) {
    const auto run = verify("verify_ok", ranks, flags);
    EXPECT_EQ(run.rc, 0) << flags << "\n" << run.output;
    EXPECT_NE(run.output.find("PASS: the layout matches one process"), std::string::npos) << run.output;
    // Every parameter of the tiny model (2 layers: 9 each, embedding, norm, head) was compared.
    EXPECT_NE(run.output.find("(21 gradients and 21 parameters compared per step)"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find("\n2     "), std::string::npos) << "a row for step 2\n" << run.output;
  }
}

// A deliberately broken layout: gradients averaged over sp where they must be summed. The loss
// and (Adam being scale-free) the parameters barely move, so a loss curve hides it; verify names
// the gradients, the factor and the likely cause, and exits 1.
TEST(ColossalVerify, ABrokenLayoutIsCaughtAndNamed) {
  const auto run = verify("verify_broken", 2, "--plugin hybrid --sp 2 --sp_mode all_to_all",
                          "COLOSSAL_INJECT_FAULT=average_over_sequence_parallel ");
  EXPECT_EQ(run.rc >> 8, 1) << run.output;
  EXPECT_NE(run.output.find("FAIL: "), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("step 1: gradient of 'lm_head.weight' differs by"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("(relative 0.5 > 0.0001)"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("hint: step 1: every gradient is 0.5 x one process's"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("step 1: loss"), std::string::npos) << "the loss itself matches\n" << run.output;
}

// What cannot be verified is said: a run that fails (here an unknown fault name) and a missing
// program end with exit 2 and the reason.
TEST(ColossalVerify, FailedRunsAndBadUsageAreNamed) {
  const auto bad_fault = verify("verify_typo", 2, "--plugin hybrid --sp 2 --sp_mode all_to_all", "COLOSSAL_INJECT_FAULT=average_over_sp ");
  EXPECT_EQ(bad_fault.rc >> 8, 2) << bad_fault.output;
  EXPECT_NE(bad_fault.output.find("COLOSSAL_INJECT_FAULT: unknown fault 'average_over_sp'"), std::string::npos)
      << bad_fault.output;
  EXPECT_NE(bad_fault.output.find("colossal verify: the layout run failed"), std::string::npos) << bad_fault.output;
  // A MoE model whose loss is a per-replica statistic is refused by name, not misjudged; without
  // one (aux 0, dropless) its ep layout verifies.
  const std::string moe = workspace().dir + "/verify_moe.json";
  auto write_moe = [&](double aux) {
    std::ofstream(moe) << R"({"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "vocab_size": 600,
      "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": )" << aux << "}";
  };
  write_moe(0.01);
  const auto refused = verify("verify_moe_aux", 2, "--model_config " + moe + " --plugin hybrid --ep 2");
  EXPECT_NE(refused.rc, 0) << refused.output;
  EXPECT_NE(refused.output.find("router_aux_loss_coef 0.01 and capacity_factor 0 make each replica's loss"),
            std::string::npos) << refused.output;
  write_moe(0);
  const auto verified = verify("verify_moe", 2, "--model_config " + moe + " --plugin hybrid --ep 2");
  EXPECT_EQ(verified.rc, 0) << verified.output;
  const std::string out = workspace().dir + "/verify_usage.txt";
  const int rc = std::system((testing::binary_dir() + "/colossal verify --nproc_per_node 2 > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc >> 8, 2) << text;
  EXPECT_NE(text.find("colossal verify: no program"), std::string::npos) << text;
}

}  // namespace
}  // namespace colossal::llama
