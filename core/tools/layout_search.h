#pragma once
// The layout selector behind --plugin auto: enumerate the layouts that divide the world and fit
// memory, rank them with a cost model built from rates measured on this machine, then time a few
// real steps of the best few and keep the fastest measured one.
//
//   auto rates = tools::measure_rates();                       // collective: every rank calls it
//   auto candidates = tools::enumerate_layouts(spec, space, is_valid);
//   auto ranked = tools::rank_layouts(spec, candidates, rates, space);
//   auto report = tools::select_layout(ranked, trial, options); // trial(layout) -> s per step
//   std::cout << report.format();  report.to_json()
//
// The global batch stays what the user asked for (samples per step over all replicas); a layout
// with fewer data-parallel replicas gives each a larger share.
#include <nlohmann/json_fwd.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tools/model_analysis.h"

namespace colossal::tools {

/// Rates measured on this machine, the same on every rank (rank 0's measurement, broadcast).
struct MachineRates {
  double matmul_flops = 0;                 // one rank's fp32 (or compute dtype) matrix-product rate, FLOP/s
  // The rate at the model's own shapes: [rows x hidden] @ [hidden x intermediate / tp], by (rows,
  // tp). Small microbatches and narrow tensor-parallel slices multiply slower than big ones.
  std::map<std::pair<int64_t, int>, double> matmul_curve;
  double matmul_rate(int64_t rows, int tp) const;
  std::map<int, double> all_reduce_bps;    // by group size: buffer bytes / all-reduce time (4 MiB buffer)
  std::map<int, double> all_reduce_latency_s;  // by group size: one 4-byte all-reduce
  // ZeRO's collectives, by group size: the full buffer's bytes (4 MiB) / time. Measured rather than
  // derived from the all-reduce: a transport's reduce-scatter and all-gather need not cost half an
  // all-reduce each.
  std::map<int, double> reduce_scatter_bps, all_gather_bps;
  double p2p_bps = 0;                      // send/recv between two ranks, bytes/s
  double copy_bps = 0;                     // host<->device (on a CPU build: host memcpy), bytes/s
  int64_t device_bytes = 0;                // memory one rank may use on its device (CPU: host share)
  int64_t host_bytes = 0;                  // host memory one rank may use (offload)
  std::string describe() const;
};

/// Measures the rates with the world's ranks (a collective call; a few seconds). Group sizes are
/// the powers of two up to the world size, measured on ranks [0, size). With a model, also the
/// matrix-product rate at its shapes (matmul_curve).
MachineRates measure_rates(const ModelSpec* spec = nullptr);

struct SearchSpace {
  int world = 1;
  int64_t global_batch = 1;  // samples per optimizer step over every replica
  int64_t sequence = 0;
  std::string precision = "fp32";
  std::vector<std::string> plugins = {"ddp", "zero1", "zero2", "gemini", "hybrid"};
  bool try_checkpointing = true;
  bool try_offload = true;   // gemini with its optimizer on the host (when the device would not hold it)
  int max_tp = 8, max_pp = 8;
  // Calibration from the model's own code, measured at start-up by the app (same on every rank):
  // measured / predicted time of a layer's forward and backward, and what checkpointing costs on
  // top (the FLOP count says 4/3; element-wise work and allocation make it differ).
  double compute_scale = 1.0;
  double checkpoint_factor = 4.0 / 3.0;
  // The same slice under tensor (sequence) parallelism of each size: its time at tp (sp) t over
  // (its one-rank time / t), which folds the narrower products, the element-wise work the axis
  // does not split and its collectives into one factor; and checkpointing's cost at that size.
  std::map<int, double> tp_scale, tp_checkpoint_factor;
  std::map<int, double> sp_scale, sp_checkpoint_factor;  // all_to_all, the mode the search uses
};

/// Every layout of the space: the plain plugins over the whole world, and the hybrid plugin for
/// each pp x dp x tp (x ep for a MoE) that divides the world, ZeRO stage 0-2 over dp, with and
/// without activation checkpointing. `is_valid` (the model's own rules: heads divisible by tp,
/// layers by pp...) drops the others; a layout whose batch does not divide is dropped too.
std::vector<Layout> enumerate_layouts(const ModelSpec& spec, const SearchSpace& space,
                                      const std::function<bool(const Layout&)>& is_valid);

struct Candidate {
  Layout layout;
  double predicted_s = 0;         // per optimizer step
  std::map<std::string, double> terms;  // compute, bubble, dp, tp, sp, pp, offload (seconds)
  int64_t predicted_bytes = 0;    // device bytes per rank (model state + activations)
  int64_t predicted_host_bytes = 0;
  bool fits = true;
  std::string why_not;            // when it does not fit
  std::optional<double> measured_s;  // after a trial
  std::string trial_error;           // a trial that failed (out of memory, a layout rule)
};

/// Predicts every layout's step time and memory; sorted fastest first, those that do not fit last.
std::vector<Candidate> rank_layouts(const ModelSpec& spec, const std::vector<Layout>& layouts,
                                    const MachineRates& rates, const SearchSpace& space);

struct SelectOptions {
  int trials = 3;          // real trials of the best predicted candidates
  double budget_s = 120;   // stop trying more candidates once this much time went into trials
};

struct SelectionReport {
  std::vector<Candidate> candidates;  // every one considered, ranked by prediction
  int chosen = -1;                    // index into candidates
  std::string reason;
  double search_s = 0;
  MachineRates rates;
  std::string format(int max_rows = 25) const;
  nlohmann::json to_json() const;
};

/// The layout a user would run without the search, among those that fit: plain DDP (without
/// activation checkpointing where that fits), else the best-predicted pure data-parallel one.
std::optional<size_t> baseline_index(const std::vector<Candidate>& ranked);

/// Times `trial` on the best `options.trials` candidates that fit (fewer when the budget runs out;
/// one of them always the baseline above) and picks the fastest measured. `trial` returns seconds per step and is called on every rank
/// with the same layout; it throws for a layout that cannot run (reported, the next one tried).
SelectionReport select_layout(std::vector<Candidate> ranked, const std::function<double(const Layout&)>& trial,
                              const SelectOptions& options);

/// Spearman's rank correlation of two equally long series (benchmarks, tests).
double spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace colossal::tools
