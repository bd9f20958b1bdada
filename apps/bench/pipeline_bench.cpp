// bench_pipeline: every pipeline schedule on the same LLaMA work, side by side in one job.
//
//   colossal run --nproc_per_node P -- build/apps/bench_pipeline [--shape S|M|B] [--microbatches 8]
//       [--micro_rows 1] [--steps 3]
//
// One stage per rank (pp = P, dp 1). Per schedule: the median step time (forward and backward of
// every microbatch, then AdamW), tokens/s, and each stage's idle fraction measured from its own
// timeline (1 - the time its steps computed / the step's wall time; waiting for an input counts
// as idle), beside the schedule's theory (bubble b as an idle fraction b / (1 + b)) and the
// simulated unit-cost timeline, and the schedule simulated with the stages' measured step times
// (the bubble of this work, unequal stages included: what the runtime should reach), and each
// stage's peak resident memory during the schedule's steps. Last, the same microbatches over
// data-parallel replicas (DDP), what a user whose model fits on every rank would run instead.
//
// Ranks sharing cores compete for them: measured idle time then hides other ranks' compute.
// Quote figures from runs with a core (or more) per rank.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <array>
#include <cstdio>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/pipeline/runner.h"
#include "llama/model.h"
#include "llama/pipeline.h"
#include "llama/shapes.h"

namespace dist = colossal::dist;
namespace pipeline = colossal::parallel::pipeline;
using colossal::bench::median;

namespace {

struct Args {
  std::string shape = "S";
  int microbatches = 8;
  int64_t micro_rows = 1;
  int steps = 3;
};

struct Row {
  std::string name;
  double step_s = 0, tokens_s = 0, theory = 0, simulated = 0;
  double measured_sim = -1;  // the schedule simulated with each stage's measured F, B, W (-1: none)
  bool replanned = false;    // zbh1/zbv: the order run was built from measured costs
  std::vector<double> idle, peak_gib;  // per stage
  std::vector<std::array<double, 3>> work_ms;  // per stage: mean F, B (or Bi), W step
};

Row run_schedule(const Args& a, const std::string& kind, int chunks) {
  const int p = dist::world_size();
  auto shape = colossal::llama::benchmark_shape(a.shape);
  colossal::booster::PluginConfig c;
  c.name = "hybrid";
  c.device = "cpu";
  c.layout.pp = p;
  c.options["pp_schedule"] = kind;
  c.options["num_model_chunks"] = chunks;
  c.options["num_microbatches"] = a.microbatches;
  auto plugin = colossal::booster::make_plugin(c);
  auto ctx = plugin->parallel_context();
  torch::manual_seed(1);
  colossal::llama::LlamaForCausalLM model(shape.config, ctx);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-4));
  pipeline::Schedule schedule(ctx.pipeline.schedule);
  pipeline::PipelineRunner runner(schedule, ctx.pipeline.group);
  const auto fns = colossal::llama::stage_functions(model);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto ids = torch::randint(shape.config.vocab_size, {a.microbatches * a.micro_rows, shape.sequence}, gen, torch::kInt64);
  const auto micro = ids.split(a.micro_rows);
  std::vector<double> times, idle;
  std::array<double, 3> work_sum{}, work_count{};
  colossal::reset_peak_resident();  // this schedule's peak, not an earlier one's
  // Three warm-up steps: zbh1 and zbv re-plan their order from the costs of the second and third.
  constexpr int kWarmup = 3;
  for (int step = 0; step < a.steps + kWarmup; ++step) {
    dist::barrier(dist::world_group());
    double pipeline_s = 0;  // the schedule's part of the step: the bubble is measured within it
    const double s = colossal::bench::seconds([&] {
      opt.zero_grad();
      pipeline_s = colossal::bench::seconds([&] { runner.run(fns, micro, micro); });
      opt.step();
    });
    if (step < kWarmup) continue;
    double busy = 0;
    for (const auto& r : runner.timeline()) {
      busy += r.end_s - r.start_s;
      const int k = pipeline::cost_index(r.step.work);
      work_sum[k] += (r.end_s - r.start_s) * 1e3;
      work_count[k] += 1;
    }
    times.push_back(s);
    idle.push_back(1.0 - busy / pipeline_s);  // not the optimizer step: no schedule removes it
  }
  Row row;
  row.name = kind + (chunks > 1 ? " (" + std::to_string(chunks) + " chunks)" : "");
  row.step_s = median(times);
  // Every stage's figures on every rank.
  auto mean_ms = [&](int k) { return work_count[k] > 0 ? work_sum[k] / work_count[k] : 0.0; };
  constexpr int kFields = 6;
  auto mine = torch::tensor({median(idle), colossal::peak_resident_gib(), row.step_s, mean_ms(0), mean_ms(1), mean_ms(2)},
                            torch::kFloat64);
  auto all = torch::empty({p * kFields}, torch::kFloat64);
  dist::all_gather(all, mine, dist::world_group());
  double slowest = 0;
  for (int r = 0; r < p; ++r) {
    auto f = [&](int i) { return all[r * kFields + i].item<double>(); };
    row.idle.push_back(f(0));
    row.peak_gib.push_back(f(1));
    slowest = std::max(slowest, f(2));
    row.work_ms.push_back({f(3), f(4), f(5)});
  }
  row.step_s = slowest;
  row.tokens_s = static_cast<double>(a.microbatches * a.micro_rows * shape.sequence) / row.step_s;
  const double b = schedule.theoretical_bubble();
  row.theory = b / (1 + b);
  row.simulated = pipeline::simulate(schedule).mean_idle();
  // The idle this schedule would have with these stages and free, instant communication: the
  // bubble of the work as it is (unequal stages included), against which the runtime is judged.
  std::vector<pipeline::StepCosts> costs;
  for (const auto& w : row.work_ms) costs.push_back({w[0], w[1], w[2]});
  row.measured_sim = pipeline::simulate(runner.schedule(), costs).mean_idle();
  row.replanned = !runner.schedule().options().costs.empty();  // zbh1/zbv: the re-planned order
  return row;
}

// What a user would run instead when the model fits on every rank: the same microbatches shared
// over data-parallel replicas (DDP, gradients accumulated locally and all-reduced once per step).
Row run_data_parallel(const Args& a) {
  const int p = dist::world_size();
  COLOSSAL_CHECK(a.microbatches % p == 0, "bench_pipeline: --microbatches ", a.microbatches,
                 " does not divide over ", p, " data-parallel ranks for the reference row");
  auto shape = colossal::llama::benchmark_shape(a.shape);
  colossal::booster::PluginConfig c;
  c.name = "ddp";
  c.device = "cpu";
  auto plugin = colossal::booster::make_plugin(c);
  torch::manual_seed(1);
  colossal::llama::LlamaForCausalLM model(shape.config);
  auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-4));
  colossal::booster::Booster booster(plugin);
  auto boosted = booster.boost(model.ptr(), opt);
  const int mine = a.microbatches / p;
  colossal::reset_peak_resident();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  auto ids = torch::randint(shape.config.vocab_size, {a.microbatches * a.micro_rows, shape.sequence}, gen, torch::kInt64);
  const auto micro = ids.narrow(0, dist::rank() * mine * a.micro_rows, mine * a.micro_rows).split(a.micro_rows);
  std::vector<double> times;
  for (int step = 0; step <= a.steps; ++step) {
    dist::barrier(dist::world_group());
    const double s = colossal::bench::seconds([&] {
      boosted.optimizer->zero_grad();
      for (int i = 0; i < mine; ++i) {
        auto run = [&] { booster.backward(model->loss(micro[i], micro[i]) / static_cast<double>(mine), *boosted.optimizer); };
        if (i + 1 < mine) booster.no_sync(*boosted.optimizer, run);
        else run();
      }
      boosted.optimizer->step();
    });
    if (step > 0) times.push_back(s);
  }
  Row row;
  row.name = "ddp (no pipeline)";
  auto t = torch::tensor({median(times), colossal::peak_resident_gib()}, torch::kFloat64);
  auto all = torch::empty({p * 2}, torch::kFloat64);
  dist::all_gather(all, t, dist::world_group());
  for (int r = 0; r < p; ++r) {
    row.step_s = std::max(row.step_s, all[r * 2].item<double>());
    row.peak_gib.push_back(all[r * 2 + 1].item<double>());
    row.idle.push_back(0);
  }
  row.tokens_s = static_cast<double>(a.microbatches * a.micro_rows * shape.sequence) / row.step_s;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"bench_pipeline: every pipeline schedule on the same LLaMA work"};
  app.add_option("--shape", a.shape, "S | M | B (balanced: small vocabulary, equal stages; llama/shapes.h)");
  app.add_option("--microbatches", a.microbatches, "microbatches per step");
  app.add_option("--micro_rows", a.micro_rows, "sequences per microbatch");
  app.add_option("--steps", a.steps, "timed steps per schedule (after three warm-up steps; DDP after one)");
  CLI11_PARSE(app, argc, argv);
  dist::init();
  const int p = dist::world_size();
  COLOSSAL_CHECK(p >= 2, "bench_pipeline: run it under colossal run with 2 or more ranks (one per stage)");
  at::set_num_threads(1);
  std::vector<Row> rows;
  for (auto [kind, chunks] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2},
                              std::pair{"zbh1", 1}, std::pair{"zbv", 2}})
    rows.push_back(run_schedule(a, kind, chunks));
  if (a.microbatches % p == 0) rows.push_back(run_data_parallel(a));
  if (dist::rank() == 0) {
    auto shape = colossal::llama::benchmark_shape(a.shape);
    std::printf("bench_pipeline: shape %s (%ld layers, dim %ld, sequence %ld), pp %d, %d microbatches x %ld sequences, "
                "1 thread per rank\n",
                a.shape.c_str(), shape.config.num_hidden_layers, shape.config.hidden_size, shape.sequence, p,
                a.microbatches, a.micro_rows);
    std::printf("%-22s %9s %9s %7s %7s %8s %7s  %s\n", "schedule", "step ms", "tokens/s", "theory", "sim",
                "sim meas", "idle", "idle per stage / peak GiB per stage");
    for (const auto& r : rows) {
      double mean = 0;
      for (double x : r.idle) mean += x / r.idle.size();
      std::string stages;
      for (size_t s = 0; s < r.idle.size(); ++s) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%.3f/%.2f", s ? "  " : "", r.idle[s], r.peak_gib[s]);
        stages += buf;
      }
      if (r.measured_sim < 0) {  // the data-parallel reference: no pipeline, no bubble
        std::printf("%-22s %9.1f %9.0f %7s %7s %8s %7s  %s\n", r.name.c_str(), r.step_s * 1e3, r.tokens_s, "-", "-",
                    "-", "-", stages.c_str());
        continue;
      }
      std::printf("%-22s %9.1f %9.0f %7.3f %7.3f %8.3f %7.3f  %s\n",
                  (r.name + (r.replanned ? " *" : "")).c_str(), r.step_s * 1e3, r.tokens_s, r.theory, r.simulated,
                  r.measured_sim, mean, stages.c_str());
    }
    std::printf("(* : the order was re-planned from the measured step costs of warm-up steps 2 and 3)\n");
    // Where the time goes: a stage's mean step of each kind (for chunked schedules, over its
    // chunks). Unequal stages are the bubble theory leaves out.
    std::printf("\n%-22s  %s\n", "schedule", "mean F / B / W ms per stage");
    for (const auto& r : rows) {
      if (r.work_ms.empty()) continue;
      std::string stages;
      for (size_t s = 0; s < r.work_ms.size(); ++s) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%s%.1f/%.1f/%.1f", s ? "  " : "", r.work_ms[s][0], r.work_ms[s][1], r.work_ms[s][2]);
        stages += buf;
      }
      std::printf("%-22s  %s\n", r.name.c_str(), stages.c_str());
    }
  }
  dist::shutdown();
  return 0;
}
