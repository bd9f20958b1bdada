// bench_moe: a Mixtral-style model (8 experts, top 2) whose active parameters match the M shape
// (dim 768, 12 layers, vocab 32000: each expert's ffn is half of M's 2048, so two experts per
// token do M's MLP work), side by side in one run:
//   1. On 2 and 4 ranks (data parallel, batch 1 x --seq per rank): tokens/s at ep 1, 2, 4, the
//      expert all-to-all's share of the step (counts and rows, forward and backward), peak
//      resident memory per rank, and the dense M model on the same ranks.
//   2. Load balance while training: the busiest expert's tokens against the mean (load_max) and
//      the idlest's (load_min) over --balance_steps steps, with and without the load-balancing
//      loss. A small MoE (vocabulary 512, 4 layers of dim 256, 8 experts of ffn 256, top 2) on 2
//      ranks at ep 2, trained on text from a fixed random Markov chain (something to learn, so
//      routing can specialise, or collapse).
//
//   build/apps/bench_moe [--seq 512] [--steps 3] [--balance_steps 200] [--skip_throughput] [--skip_balance]
// Each measurement is its own `colossal run` job of this program. Ranks share this machine's
// cores (one thread each): figures are for comparing layouts in one run, not absolute speed.
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/factory.h"
#include "core/parallel/expert/dispatch.h"
#include "core/parallel/expert/router_stats.h"
#include "llama/model.h"
#include "llama/parallelize.h"
#include "llama/shapes.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::bench::median;
using colossal::llama::LlamaConfig;

namespace {

struct Args {
  int64_t seq = 512;
  int steps = 3;
  int balance_steps = 200;
  bool skip_throughput = false, skip_balance = false;
  // One job (set by the driver).
  std::string job;  // "" (driver) | moe | dense | balance
  int ep = 1;
  double aux = 0;
  std::string row_file;
};

LlamaConfig moe_m() {
  auto c = colossal::llama::benchmark_shape("M").config;
  c.intermediate_size = 1024;  // x top 2 = M's 2048 per token
  c.num_local_experts = 8;
  c.num_experts_per_tok = 2;
  c.router_aux_loss_coef = 0.01;
  return c;
}

LlamaConfig balance_model(double aux) {
  auto c = colossal::llama::benchmark_shape("B").config;  // vocabulary 512
  c.hidden_size = 256;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.num_hidden_layers = 4;
  c.intermediate_size = 256;
  c.num_local_experts = 8;
  c.num_experts_per_tok = 2;
  c.router_aux_loss_coef = aux;
  return c;
}

booster::PluginConfig hybrid(int ep) {
  booster::PluginConfig pc;
  pc.name = "hybrid";
  pc.device = "cpu";
  pc.layout.ep = ep;
  return pc;
}

// One throughput job: a few steps of batch 1 x seq per rank.
void throughput_job(const Args& a) {
  auto cfg = a.job == "dense" ? colossal::llama::benchmark_shape("M").config : moe_m();
  cfg.max_position_embeddings = std::max<int64_t>(cfg.max_position_embeddings, a.seq);
  auto plugin = booster::make_plugin(hybrid(a.ep));
  colossal::llama::check_parallel(cfg, plugin->dims(), a.seq);
  torch::manual_seed(0);
  colossal::llama::LlamaForCausalLM model(cfg, colossal::parallel::ParallelContext::from(plugin->dims()));
  auto optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), optimizer);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + dist::rank());
  auto ids = torch::randint(cfg.vocab_size, {1, a.seq}, gen, torch::kInt64);
  std::vector<double> times, exchange;
  for (int s = 0; s <= a.steps; ++s) {  // step 0 warms up
    dist::barrier(dist::world_group());
    const double before = colossal::parallel::expert::exchange_seconds();
    times.push_back(colossal::bench::seconds([&] {
      b.optimizer->zero_grad();
      booster.backward(model->loss(ids, ids), *b.optimizer);
      b.optimizer->step();
    }));
    exchange.push_back(colossal::parallel::expert::exchange_seconds() - before);
  }
  times.erase(times.begin());
  exchange.erase(exchange.begin());
  // The slowest rank's step is the job's; its exchange share is the ranks' mean.
  auto t = torch::tensor({median(times), median(exchange) / median(times), colossal::peak_resident_gib()}, torch::kFloat64);
  auto mean_share = t[1].clone();
  dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kMax);
  dist::all_reduce(mean_share, dist::world_group(), dist::ReduceOp::kAvg);
  if (dist::rank() == 0) {
    std::ofstream out(a.row_file);
    out << t[0].item<double>() << " " << plugin->dims().dp() * a.seq / t[0].item<double>() << " "
        << mean_share.item<double>() << " " << t[2].item<double>() << "\n";
  }
}

// Text from a fixed random Markov chain over the vocabulary: each token has 4 likely successors.
torch::Tensor markov_batch(int64_t vocab, int64_t rows, int64_t seq, at::Generator& gen) {
  static torch::Tensor successors;
  if (!successors.defined()) {
    auto fixed = at::make_generator<at::CPUGeneratorImpl>(1234);
    successors = torch::randint(vocab, {vocab, 4}, fixed, torch::kInt64);
  }
  auto out = torch::empty({rows, seq}, torch::kInt64);
  auto start = torch::randint(vocab, {rows}, gen, torch::kInt64);
  auto pick = torch::randint(4, {rows, seq}, gen, torch::kInt64);
  auto o = out.accessor<int64_t, 2>();
  auto p = pick.accessor<int64_t, 2>();
  auto s = successors.accessor<int64_t, 2>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t t = start[r].item<int64_t>();
    for (int64_t i = 0; i < seq; ++i) {
      o[r][i] = t;
      t = s[t][p[r][i]];
    }
  }
  return out;
}

// Trains the small MoE; writes load_max, load_min and the loss every 25 steps.
void balance_job(const Args& a) {
  auto cfg = balance_model(a.aux);
  const int64_t seq = 256, rows = 4;
  cfg.max_position_embeddings = seq;
  auto plugin = booster::make_plugin(hybrid(a.ep));
  torch::manual_seed(0);
  colossal::llama::LlamaForCausalLM model(cfg, colossal::parallel::ParallelContext::from(plugin->dims()));
  auto optimizer = colossal::optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-3});
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), optimizer);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7 + dist::rank());
  colossal::parallel::expert::RouterWindow window(cfg.num_local_experts);
  std::ofstream out;
  if (dist::rank() == 0) out.open(a.row_file);
  double loss_sum = 0;
  for (int step = 1; step <= a.balance_steps; ++step) {
    auto ids = markov_batch(cfg.vocab_size, rows, seq, gen);
    b.optimizer->zero_grad();
    auto loss = model->loss(ids, ids);
    booster.backward(loss, *b.optimizer);
    booster.clip_grad_norm(*b.optimizer, 1.0);
    b.optimizer->step();
    window.add(model->router_losses());
    loss_sum += loss.item<double>();
    if (step % 25 == 0 || step == 1) {
      auto report = window.report(plugin->dims().group(dist::Axis::kDp));
      double load_max = 0, load_min = 0, aux_loss = 0;
      for (const auto& [k, v] : report.metrics) {
        if (k == "load_max") load_max = v;
        if (k == "load_min") load_min = v;
        if (k == "aux_loss") aux_loss = v;
      }
      const int n = step == 1 ? 1 : 25;
      if (dist::rank() == 0) out << step << " " << load_max << " " << load_min << " " << aux_loss << " " << loss_sum / n << std::endl;
      window = colossal::parallel::expert::RouterWindow(cfg.num_local_experts);
      loss_sum = 0;
    }
  }
}

std::string launch(const std::string& self, int ranks, const std::string& args, const std::string& row_file) {
  std::string launcher = self.substr(0, self.rfind('/')) + "/colossal";
  std::ostringstream cmd;
  cmd << "OMP_NUM_THREADS=1 '" << launcher << "' run --nproc_per_node " << ranks << " -- '" << self << "' " << args
      << " --row_file " << row_file << " > " << row_file << ".log 2>&1";
  int rc = std::system(cmd.str().c_str());
  if (rc == 0) return "";
  std::ifstream log(row_file + ".log");
  std::string line, last;
  while (std::getline(log, line))
    if (!line.empty()) last = line;
  return "failed (exit " + std::to_string(rc) + "): " + last;
}

void throughput_table(const Args& a, const std::string& self) {
  const auto m = moe_m();
  std::printf("\n1. %.0fM-parameter MoE (8 experts x ffn 1024, top 2: %.1fM active per token) against dense M "
              "(%.1fM), sequence %ld, batch 1 per rank, median of %d steps after a warm-up, 1 thread per rank\n",
              m.num_parameters() / 1e6, m.num_active_parameters() / 1e6,
              colossal::llama::benchmark_shape("M").config.num_parameters() / 1e6, a.seq, a.steps);
  std::printf("%-6s %-10s %8s %10s %12s %10s %16s\n", "ranks", "model", "step s", "tokens/s", "vs dense", "a2a share",
              "peak RSS GiB/rk");
  const std::string row_file = "/tmp/bench_moe_row_" + std::to_string(::getpid());
  for (int ranks : {2, 4}) {
    double dense = 0;
    for (int ep : {0, 1, 2, 4}) {
      if (ep > ranks) continue;
      const std::string label = ep == 0 ? "dense M" : "moe ep " + std::to_string(ep);
      // Each rank holds its share of the experts and every dense weight, with a gradient, AdamW's
      // two moments and a DDP bucket: ~20 bytes per parameter, plus activations.
      const auto dense_cfg = colossal::llama::benchmark_shape("M").config;
      const double expert_params = m.num_hidden_layers * m.num_local_experts * 3.0 * m.hidden_size * m.intermediate_size;
      const double per_rank = ep == 0 ? dense_cfg.num_parameters()
                                      : m.num_parameters() - expert_params + expert_params / ep;
      const double need_gib = ranks * (per_rank * 20 / double(1ull << 30) + 1.0);
      if (need_gib > 0.85 * colossal::available_memory_gib()) {
        std::printf("%-6d %-10s skipped: needs ~%.1f GiB, %.1f GiB available\n", ranks, label.c_str(), need_gib,
                    colossal::available_memory_gib());
        continue;
      }
      std::fprintf(stderr, "[bench_moe] %d ranks, %s...\n", ranks, label.c_str());
      std::ostringstream args;
      args << "--job " << (ep == 0 ? "dense" : "moe") << " --ep " << std::max(ep, 1) << " --seq " << a.seq << " --steps "
           << a.steps;
      auto error = launch(self, ranks, args.str(), row_file);
      double step_s = 0, tokens_s = 0, share = 0, peak = 0;
      std::ifstream in(row_file);
      if (!error.empty() || !(in >> step_s >> tokens_s >> share >> peak)) {
        std::printf("%-6d %-10s %s\n", ranks, label.c_str(), error.empty() ? "no result" : error.c_str());
        continue;
      }
      if (ep == 0) dense = tokens_s;
      std::printf("%-6d %-10s %8.2f %10.1f %11.2fx %9.1f%% %16.2f\n", ranks, label.c_str(), step_s, tokens_s,
                  dense > 0 ? tokens_s / dense : 0.0, 100 * share, peak);
      std::fflush(stdout);
    }
  }
  ::unlink(row_file.c_str());
  ::unlink((row_file + ".log").c_str());
}

void balance_table(const Args& a, const std::string& self) {
  std::printf("\n2. Load balance over %d training steps (a small MoE: dim 256, 4 layers, 8 experts top 2; 2 ranks at ep 2): the busiest "
              "and idlest expert's tokens / the mean, over the 25 steps before each row\n", a.balance_steps);
  std::vector<std::vector<std::array<double, 5>>> runs;
  const std::string row_file = "/tmp/bench_moe_balance_" + std::to_string(::getpid());
  for (double aux : {0.0, 0.01}) {
    std::fprintf(stderr, "[bench_moe] balance, aux loss x %g...\n", aux);
    std::ostringstream args;
    args << "--job balance --ep 2 --aux " << aux << " --balance_steps " << a.balance_steps;
    auto error = launch(self, 2, args.str(), row_file);
    std::vector<std::array<double, 5>> rows;
    std::ifstream in(row_file);
    std::array<double, 5> r{};
    while (in >> r[0] >> r[1] >> r[2] >> r[3] >> r[4]) rows.push_back(r);
    if (!error.empty()) std::printf("aux %g: %s\n", aux, error.c_str());
    runs.push_back(rows);
  }
  std::printf("%-6s | %-30s | %-30s\n", "step", "no aux loss: max  min   loss", "aux x 0.01: max  min  aux  loss");
  for (size_t i = 0; i < std::max(runs[0].size(), runs[1].size()); ++i) {
    auto cell = [&](size_t k, bool aux) {
      if (i >= runs[k].size()) return std::string("-");
      char buf[96];
      const auto& r = runs[k][i];
      if (aux) std::snprintf(buf, sizeof buf, "%5.2f %5.2f %5.3f %5.3f", r[1], r[2], r[3], r[4]);
      else std::snprintf(buf, sizeof buf, "%5.2f %5.2f %5.3f", r[1], r[2], r[4]);
      return std::string(buf);
    };
    const double step = i < runs[0].size() ? runs[0][i][0] : runs[1][i][0];
    std::printf("%-6.0f | %-30s | %-30s\n", step, cell(0, false).c_str(), cell(1, true).c_str());
  }
  ::unlink(row_file.c_str());
  ::unlink((row_file + ".log").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app("bench_moe: expert parallelism against the dense model, and load balance while training");
  app.add_option("--seq", a.seq, "tokens per sample (batch 1 per rank)");
  app.add_option("--steps", a.steps, "timed steps per layout (after one warm-up)");
  app.add_option("--balance_steps", a.balance_steps, "training steps of the load-balance runs");
  app.add_flag("--skip_throughput", a.skip_throughput);
  app.add_flag("--skip_balance", a.skip_balance);
  app.add_option("--job", a.job)->group("");
  app.add_option("--ep", a.ep)->group("");
  app.add_option("--aux", a.aux)->group("");
  app.add_option("--row_file", a.row_file)->group("");
  CLI11_PARSE(app, argc, argv);
  try {
    if (a.job.empty()) {
      const std::string self = colossal::bench::self_path();
      if (!a.skip_throughput) throughput_table(a, self);
      if (!a.skip_balance) balance_table(a, self);
      return 0;
    }
    dist::init();
    if (a.job == "balance") balance_job(a);
    else throughput_job(a);
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_moe: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
