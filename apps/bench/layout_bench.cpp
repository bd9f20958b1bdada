// bench_layout: the layout selector (--plugin auto) against an exhaustive measured sweep.
// Run as a job of N ranks:
//
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/bench_layout --shape S [--batch 4] [--steps 3]
//
// Every valid layout of the search space (the plain plugins, the hybrid plugin's tp/pp/sp splits,
// ZeRO stages, with and without activation checkpointing) is timed for real (median of --steps
// after a warm-up); the selector's pick is what it would choose (the fastest measured of its best
// --trials predicted). Printed: each layout's predicted and measured step time, the Spearman rank
// correlation of the two, the pick against the best, and the search time the selector would
// spend (rates + its trials) against the sweep's.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/booster/plugin_config.h"
#include "core/common/check.h"
#include "core/dist/runtime.h"
#include "core/tools/layout_search.h"
#include "llama/layout_trial.h"
#include "llama/shapes.h"

namespace tools = colossal::tools;
namespace llama = colossal::llama;
namespace dist = colossal::dist;
namespace booster = colossal::booster;

int main(int argc, char** argv) {
  CLI::App app{"bench_layout: the --plugin auto selector against an exhaustive measured sweep"};
  std::string shape = "S";
  int64_t batch = 4, seq = 0;
  int steps = 3, trials = 3, passes = 2;
  double memory_gib = 0;
  bool no_ckpt = false;
  app.add_option("--shape", shape, "S or M (llama/shapes.h)")->capture_default_str();
  app.add_option("--batch", batch, "samples per rank under plain data parallelism (the global batch is this x world)")
      ->capture_default_str();
  app.add_option("--seq", seq, "tokens per sample (0: the shape's)");
  app.add_option("--steps", steps, "timed steps per layout (after one warm-up)")->capture_default_str();
  app.add_option("--trials", trials, "the selector's real trials")->capture_default_str();
  app.add_flag("--no_checkpointing", no_ckpt, "leave activation checkpointing out of the space");
  app.add_option("--passes", passes,
                 "sweeps over every layout (alternating order); a layout's time is its fastest pass, so one "
                 "disturbed measurement on a shared machine does not decide its rank")
      ->capture_default_str();
  app.add_option("--memory_gib", memory_gib,
                 "memory per rank the search may plan for (0: what the machine has); smaller than the model's "
                 "data-parallel needs, only sharded or offloaded layouts fit");
  CLI11_PARSE(app, argc, argv);
  try {
    dist::init();
    auto s = llama::benchmark_shape(shape);
    if (seq > 0) s.sequence = seq;
    const int world = dist::world_size(), rank = dist::rank();
    tools::SearchSpace space;
    space.world = world;
    space.global_batch = batch * world;
    space.sequence = s.sequence;
    space.try_checkpointing = !no_ckpt;
    const auto t_rates = std::chrono::steady_clock::now();
    const auto spec = llama::model_spec(s.config);
    auto rates = tools::measure_rates(&spec);
    if (memory_gib > 0) rates.device_bytes = rates.host_bytes = static_cast<int64_t>(memory_gib * (1LL << 30));
    llama::calibrate_compute(s.config, batch * s.sequence, rates, space);
    const double rates_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_rates).count();
    auto layouts = tools::enumerate_layouts(spec, space, [&](const tools::Layout& l) {
      return llama::layout_is_valid(s.config, l, world, s.sequence);
    });
    auto ranked = tools::rank_layouts(spec, layouts, rates, space);
    tools::TrialOptions o;
    o.sequence = s.sequence;
    o.steps = steps;
    booster::PluginConfig base;
    base.device = "cpu";
    if (rank == 0) {
      std::string tp;
      for (const auto& [t, f] : space.tp_scale)
        tp += c10::str("; tp ", t, " x", std::round(f * 100) / 100, " (checkpointing x",
                       std::round(space.tp_checkpoint_factor[t] * 100) / 100, ")");
      for (const auto& [t, f] : space.sp_scale)
        tp += c10::str("; sp ", t, " x", std::round(f * 100) / 100, " (checkpointing x",
                       std::round(space.sp_checkpoint_factor[t] * 100) / 100, ")");
      const auto fit = std::count_if(ranked.begin(), ranked.end(), [](const auto& c) { return c.fits; });
      std::printf("shape %s (seq %ld), %d ranks, global batch %ld, %zu layouts (%ld fit); %s; compute scale %.2f, checkpointing x%.2f%s\n",
                  shape.c_str(), s.sequence, world, space.global_batch, ranked.size(), static_cast<long>(fit), rates.describe().c_str(),
                  space.compute_scale, space.checkpoint_factor, tp.c_str());
      std::fflush(stdout);
    }
    // The sweep: every layout that fits, in predicted order, then (further passes) in reverse
    // and again; each layout keeps its fastest pass.
    double sweep_s = 0;
    std::vector<size_t> order;
    for (size_t i = 0; i < ranked.size(); ++i)
      if (ranked[i].fits) order.push_back(i);
    for (int pass = 0; pass < passes; ++pass) {
      if (rank == 0) std::printf("pass %d of %d\n", pass + 1, passes);
      for (size_t k = 0; k < order.size(); ++k) {
        auto& c = ranked[order[pass % 2 ? order.size() - 1 - k : k]];
        if (!c.trial_error.empty()) continue;
        const auto t0 = std::chrono::steady_clock::now();
        try {
          const double t = llama::time_training_steps(s.config, c.layout, base, o);
          c.measured_s = c.measured_s ? std::min(*c.measured_s, t) : t;
        } catch (const std::exception& e) {
          c.trial_error = colossal::error_text(e).substr(0, 120);
        }
        sweep_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (rank == 0 && pass + 1 < passes) {
          std::printf("  %-44s %8s s\n", c.layout.describe().c_str(), c.measured_s ? c10::str(*c.measured_s).substr(0, 8).c_str() : "-");
          std::fflush(stdout);
        }
      }
    }
    std::vector<double> predicted, measured;
    for (auto& c : ranked) {
      if (!c.fits) {
        if (rank == 0) std::printf("  %-44s does not fit: %s\n", c.layout.describe().c_str(), c.why_not.c_str());
        continue;
      }
      if (c.measured_s) {
        predicted.push_back(c.predicted_s);
        measured.push_back(*c.measured_s);
      }
      if (rank == 0) {
        std::string terms;  // the prediction's parts, for reading where the model is off
        for (const auto& [k, v] : c.terms)
          if (v > 0) terms += c10::str(" ", k, " ", std::round(v * 1e4) / 1e4);
        std::printf("  %-44s predicted %8.4f s %6.2f GiB  measured %8s s %s [%s ]\n", c.layout.describe().c_str(),
                    c.predicted_s, static_cast<double>(c.predicted_bytes) / (1 << 30),
                    c.measured_s ? c10::str(*c.measured_s).substr(0, 8).c_str() : "-", c.trial_error.c_str(), terms.c_str());
        std::fflush(stdout);
      }
    }
    // The selector on the sweep's own times (its trials are these measurements, taken the same way).
    double best = 1e300, trial_s = 0;
    std::string best_name;
    for (const auto& c : ranked)
      if (c.measured_s && *c.measured_s < best) {
        best = *c.measured_s;
        best_name = c.layout.describe();
      }
    // The selector sees only the predictions (its trials are the sweep's times of its picks).
    auto unmeasured = ranked;
    for (auto& c : unmeasured) c.measured_s.reset();
    int tried = 0;
    auto report = tools::select_layout(unmeasured, [&](const tools::Layout& l) {
      for (const auto& c : ranked)
        if (c.layout.describe() == l.describe() && c.measured_s) {
          ++tried;
          trial_s += (o.steps + o.warmup_steps) * *c.measured_s;
          return *c.measured_s;
        }
      throw std::runtime_error("not measured");
    }, {.trials = trials, .budget_s = 1e9});
    const double pick = *report.candidates[report.chosen].measured_s;
    const std::string pick_name = report.candidates[report.chosen].layout.describe();
    if (rank == 0) {
      std::printf("best measured: %s %.4f s\nselector's pick: %s %.4f s (%.1f%% slower than the best)\n", best_name.c_str(),
                  best, pick_name.c_str(), pick, 100 * (pick / best - 1));
      std::printf("Spearman(predicted, measured) over %zu layouts: %.3f\n", measured.size(),
                  measured.size() >= 2 ? tools::spearman(predicted, measured) : 0.0);
      std::printf("search time: selector %.1f s (rates %.1f s + %d trials' steps %.1f s), exhaustive sweep %.1f s\n",
                  rates_s + trial_s, rates_s, tried, trial_s, sweep_s);
    }
    dist::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_layout: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
  return 0;
}
