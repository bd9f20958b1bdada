// ZeRO memory and throughput on a LLaMA-shaped transformer, side by side in one run:
//   ddp         DDPPlugin (every rank holds everything)
//   zero1       optimizer state sharded
//   zero2       optimizer state and gradients sharded
//   zero3       Gemini: parameters too (chunks gathered on demand)
//   zero3_nvme  Gemini with master weights, moments and parameter shards on NVMe (io_uring)
// For each: model-state bytes per parameter on this rank (from the plugin's memory report)
// against the ZeRO arithmetic, peak resident memory per rank during training (VmHWM, reset
// after boost; the full model built before boost is reported apart), step time and tokens/s.
//
//   build/apps/bench_zero [--ranks 2,4] [--params 100e6] [--steps 3]
// runs every (ranks, plugin) pair as its own `colossal run` job (a fresh process per run, so
// one run's freed memory cannot hide in the next one's peak) and prints one table.
//   build/apps/bench_zero --ranks 1 --plugins zero3_nvme --params 3e9 --precision bf16 --steps 1
#include <sys/resource.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/fused_adamw.h"
#include "core/booster/registry.h"
#include "core/nn/deferred_init.h"
#include "llama/model.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::bench::median;
using colossal::llama::LlamaConfig;

namespace {

struct Args {
  double params = 100e6;
  int steps = 3, seq = 128, batch = 1;
  std::string plugins = "ddp,zero1,zero2,zero3,zero3_nvme";
  std::string precision = "fp32";
  std::string nvme_dir = "/tmp";
  std::string ranks = "2,4";
  bool lazy = false;  // build the model under nn::DeferredInitGuard (boost materialises it)
  std::string row_file;  // set by the driver for its child jobs
};

int64_t status_kib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
  return 0;
}
// Resets the peak-RSS high-water mark (Linux: "5" to clear_refs).
void reset_peak() { std::ofstream("/proc/self/clear_refs") << "5"; }
double gib(double bytes) { return bytes / (1LL << 30); }

std::shared_ptr<booster::Plugin> make(const std::string& name, const Args& a) {
  booster::PluginConfig c;
  c.name = name == "zero3_nvme" ? "gemini" : name;
  c.precision = a.precision;
  c.device = "cpu";
  if (c.name == "gemini" || c.name == "zero3") {
    c.options["check_first_step"] = false;  // models here go through colossal::nn::call by construction
    if (name == "zero3_nvme") {
      c.options["offload_device"] = "nvme";
      c.options["nvme_dir"] = a.nvme_dir;
      c.options["offload_optim_frac"] = 1.0;
      c.options["offload_param_frac"] = 1.0;
    }
  }
  return booster::make_plugin(c);
}

// Model-state bytes per parameter that ZeRO's arithmetic predicts (fp32 Adam: 16 in all).
double expected_bytes(const std::string& name, int n, bool mixed) {
  double w = mixed ? 2 : 4;                 // working parameters and gradients
  double master = mixed ? 4 : 0;            // separate fp32 masters (fp32: the params themselves)
  if (name == "ddp") return w + w + master + 8;
  if (name == "zero1") return w + w + (master + 8) / n;
  if (name == "zero2") return w + (w + master + 8) / n;
  if (name == "zero3") return (w + w + master + 8) / n;
  return w / n;  // zero3_nvme: only the gradient shard stays in memory
}

struct Row {
  std::string plugin;
  int ranks = 1;
  double model_state = 0, expected = 0, nvme = 0, peak_gib = 0, build_gib = 0, step_s = 0, tokens_s = 0;
  double activation_gib = 0;
  std::string report;
};

Row run(const std::string& name, const Args& a, const LlamaConfig& cfg) {
  int n = dist::world_size(), r = dist::rank();
  reset_peak();
  torch::manual_seed(0);
  colossal::llama::LlamaForCausalLM model{nullptr};
  if (a.lazy) {
    colossal::nn::DeferredInitGuard deferred;  // shapes only: boost makes what this rank keeps
    model = colossal::llama::LlamaForCausalLM(cfg);
  } else {
    model = colossal::llama::LlamaForCausalLM(cfg);
  }
  int64_t params = cfg.num_parameters();
  auto opt = std::make_shared<colossal::optim::FusedAdamW>(model->parameters(),
                                                            torch::optim::AdamWOptions(1e-4).weight_decay(0.01));
  booster::Booster b(make(name, a));
  auto boosted = b.boost(model.ptr(), opt);
  double build_peak = static_cast<double>(status_kib("VmHWM:")) * 1024.0;
  reset_peak();  // from here: training
  auto gen = torch::make_generator<at::CPUGeneratorImpl>(1234 + r);
  std::vector<double> times;
  double activations = 0;
  for (int s = 0; s < a.steps + 1; ++s) {  // the first step is warm-up
    auto ids = at::randint(cfg.vocab_size, {a.batch, a.seq}, gen, torch::kInt64);
    double t = colossal::bench::seconds([&] {
      boosted.optimizer->zero_grad();
      int64_t before = status_kib("VmRSS:");
      auto loss = model->loss(ids, ids);
      // What forward added to resident memory: activations saved for backward (and, for ZeRO-3,
      // the chunks gathered at that moment).
      activations = std::max(activations, (status_kib("VmRSS:") - before) * 1024.0);
      b.backward(loss, *boosted.optimizer);
      boosted.optimizer->step();
    });
    if (s > 0 || a.steps == 0) times.push_back(t);
    if (r == 0) COLOSSAL_LOG_INFO("[bench] ", name, " step ", s, ": ", t, " s");
  }
  auto report = boosted.optimizer->model_wrapper().hooks().memory_report(*model, *opt);
  Row row;
  row.plugin = name;
  int64_t host = report.total("host") - (report.bytes.count("gathered chunks") ? report.bytes["gathered chunks"]["host"] : 0);
  row.model_state = static_cast<double>(host) / params;
  row.nvme = static_cast<double>(report.total("nvme")) / params;
  row.expected = expected_bytes(name, n, boosted.compute_dtype != torch::kFloat32);
  // Peak over ranks, and the slowest rank's step time.
  auto stats = torch::tensor({static_cast<double>(status_kib("VmHWM:")) * 1024.0, median(times), build_peak,
                              activations}, torch::kFloat64);
  dist::all_reduce(stats, dist::world_group(), dist::ReduceOp::kMax);
  row.ranks = n;
  row.peak_gib = gib(stats[0].item<double>());
  row.step_s = stats[1].item<double>();
  row.build_gib = gib(stats[2].item<double>());
  row.activation_gib = gib(stats[3].item<double>());
  row.tokens_s = static_cast<double>(a.batch) * a.seq * n / row.step_s;
  row.report = report.format();
  return row;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("\n%-11s %6s %12s %10s %7s %11s %10s %13s %12s %9s %10s\n", "plugin", "ranks", "state B/par",
              "expected", "ratio", "nvme B/par", "fwd GiB", "train GiB/rk", "build GiB/rk", "step s", "tokens/s");
  for (const auto& r : rows)
    std::printf("%-11s %6d %12.2f %10.2f %7.3f %11.2f %10.3f %13.2f %12.2f %9.2f %10.1f\n", r.plugin.c_str(),
                r.ranks, r.model_state, r.expected, r.model_state / r.expected, r.nvme, r.activation_gib,
                r.peak_gib, r.build_gib, r.step_s, r.tokens_s);
}

std::string row_line(const Row& r) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s %d %.6f %.6f %.6f %.6f %.6f %.6f %.6f %.6f\n", r.plugin.c_str(), r.ranks,
                r.model_state, r.expected, r.nvme, r.peak_gib, r.build_gib, r.step_s, r.tokens_s, r.activation_gib);
  return buf;
}

// Driver: one `colossal run` job per (ranks, plugin), rows collected through a file.
int drive(const Args& a, const std::string& self, int argc, char** argv) {
  std::string dir = self.substr(0, self.rfind('/'));
  std::string launcher = dir + "/colossal";
  std::string passthrough = colossal::bench::passthrough_args(argc, argv, {"--ranks", "--plugins"});
  std::vector<Row> rows;
  std::stringstream ranks(a.ranks);
  std::string nr;
  while (std::getline(ranks, nr, ',')) {
    std::stringstream list(a.plugins);
    std::string name;
    while (std::getline(list, name, ',')) {
      std::string row_file = "/tmp/bench_zero_row_" + std::to_string(::getpid());
      std::string log = row_file + ".log";
      std::string cmd = "'" + launcher + "' run --nproc_per_node " + nr + " -- '" + self + "' --plugins " + name +
                        " --row_file " + row_file + passthrough + " > " + log + " 2>&1";
      std::fprintf(stderr, "[bench_zero] %s on %s rank(s)...\n", name.c_str(), nr.c_str());
      int rc = std::system(cmd.c_str());
      std::ifstream in(row_file);
      Row r;
      if (rc != 0 || !(in >> r.plugin >> r.ranks >> r.model_state >> r.expected >> r.nvme >> r.peak_gib >>
                       r.build_gib >> r.step_s >> r.tokens_s >> r.activation_gib)) {
        std::ifstream l(log);
        std::stringstream ss;
        ss << l.rdbuf();
        std::fprintf(stderr, "[bench_zero] %s on %s rank(s) failed:\n%s\n", name.c_str(), nr.c_str(), ss.str().c_str());
        return 1;
      }
      std::ifstream l(log);
      std::string line;
      while (std::getline(l, line))
        if (line.find("[rank 0]") == 0 && line.find("[bench]") == std::string::npos) std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      rows.push_back(r);
      ::unlink(row_file.c_str());
      ::unlink(log.c_str());
    }
  }
  print_table(rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"ZeRO stages: memory per rank and throughput on a LLaMA-shaped model"};
  app.add_option("--params", a.params, "approximate parameter count");
  app.add_option("--steps", a.steps, "measured steps per plugin (after one warm-up)");
  app.add_option("--seq", a.seq, "tokens per sequence");
  app.add_option("--batch", a.batch, "sequences per rank per step");
  app.add_option("--plugins", a.plugins, "comma-separated: ddp,zero1,zero2,zero3,zero3_nvme");
  app.add_option("--precision", a.precision, "fp32 | bf16 | fp16");
  app.add_option("--nvme_dir", a.nvme_dir, "directory for zero3_nvme's offload file");
  app.add_option("--ranks", a.ranks, "comma-separated rank counts (driver mode)");
  app.add_flag("--lazy", a.lazy, "build the model lazily (no weights until boost materialises this rank's part)");
  app.add_option("--row_file", a.row_file, "(internal) where a child job's rank 0 writes its row");
  CLI11_PARSE(app, argc, argv);
  if (std::getenv("RANK") == nullptr) {
    return drive(a, colossal::bench::self_path(), argc, argv);
  }
  try {
    dist::init();
    auto cfg = LlamaConfig::shaped(static_cast<int64_t>(a.params));
    cfg.max_position_embeddings = std::max<int64_t>(a.seq, 128);
    int n = dist::world_size();
    if (dist::rank() == 0) {
      std::printf("model: LLaMA-shaped, %.1fM parameters (hidden %ld, layers %ld, heads %ld, ffn %ld, vocab %ld)\n",
                  cfg.num_parameters() / 1e6, cfg.hidden_size, cfg.num_hidden_layers,
                  cfg.num_attention_heads, cfg.intermediate_size, cfg.vocab_size);
      std::printf("ranks: %d, precision: %s, batch %d x seq %d per rank, AdamW (fused), %d threads/rank, %s model\n",
                  n, a.precision.c_str(), a.batch, a.seq, at::get_num_threads(), a.lazy ? "lazily built" : "eager");
    }
    std::vector<Row> rows;
    std::stringstream list(a.plugins);
    std::string name;
    while (std::getline(list, name, ',')) {
      rows.push_back(run(name, a, cfg));
      if (dist::rank() == 0) std::printf("--- %s, rank 0 memory report\n%s", name.c_str(), rows.back().report.c_str());
    }
    if (dist::rank() == 0) {
      print_table(rows);
      if (!a.row_file.empty()) std::ofstream(a.row_file) << row_line(rows.back());
    }
    dist::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zero: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
  return 0;
}
