#pragma once
// What every training app's --plugin auto shares to time a layout for real: the plugin
// configuration that runs a layout, the timed loop of optimizer steps (pipelined or not), and the
// start-up calibration of the cost model from a small slice of the model. The model-specific part
// (building it, a batch, its loss) stays with the model (llama/layout_trial.h, vit/layout_trial.h).
#include <torch/torch.h>

#include <functional>

#include "core/booster/booster.h"
#include "core/booster/plugin_config.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/pipeline/runner.h"
#include "core/tools/layout_search.h"

namespace colossal::tools {

/// The layout's parallel sizes as the plugins take them.
dist::ParallelDims::Options parallel_options(const Layout& layout);

/// Whether `layout` divides `world` and passes a model's own rules (`rules` throws naming what
/// does not fit: heads by tp, layers by pp...).
bool layout_satisfies(const Layout& layout, int world, const std::function<void(const dist::ParallelDims&)>& rules);

/// The plugin configuration that runs `layout`, on top of `base`: its device, and the user's own
/// plugin options where the chosen plugin has them (bucket sizes, Gemini's chunk settings...; the
/// layout's settings win). `dropped`, when given, gets the options the chosen plugin does not take.
booster::PluginConfig plugin_config_for(const Layout& layout, const booster::PluginConfig& base,
                                        std::vector<std::string>* dropped = nullptr);

struct TrialOptions {
  int warmup_steps = 1;
  int steps = 2;
  int64_t sequence = 256;  // tokens per sample (LLaMA)
  uint64_t seed = 0;
};

/// A model under trial, as a trial loop drives it.
struct TrialModel {
  /// Microbatch inputs and targets -> the mean loss (the non-pipelined path).
  std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& targets)> loss;
  /// The stages (the pipelined path); `microbatches` > 0 selects it.
  parallel::pipeline::StageFunctions stage;
  int64_t microbatches = 0;
};

/// Runs `options.warmup_steps` + `options.steps` optimizer steps on one replica's batch
/// (`inputs`/`targets`, layout.replica_batch rows) the way the layout splits it: pipeline
/// microbatches through the stages, or micro-batches of layout.micro_batch with the gradients
/// accumulated (no_sync until the last). Returns the median seconds per timed step of the
/// slowest rank. Collective: every rank calls it with the same layout.
double time_optimizer_steps(booster::Booster& booster, booster::Boosted& boosted, const Layout& layout,
                            const TrialModel& model, const torch::Tensor& inputs, const torch::Tensor& targets,
                            const TrialOptions& options);

/// Sets `space.compute_scale` (a slice's measured forward+backward time over its FLOP count at the
/// measured matmul rate of its shapes) and `space.checkpoint_factor` (with activation
/// checkpointing over without) from a slice of the model (`slice`: its shape, a few layers)
/// timed on this rank at `rows` rows of `sequence` tokens. Collective: the slowest rank's times,
/// which it returns (plain, checkpointed).
std::pair<double, double> calibrate_from_slice(const ModelSpec& slice, int64_t rows, int64_t sequence, double plain_s,
                                               double checkpointed_s, const MachineRates& rates, SearchSpace& space);

/// (plain, with activation checkpointing) seconds of one forward and backward `step`, each the
/// fastest of 5 runs interleaved with the other kind's, after one unmeasured call of each;
/// `set_checkpointing` switches the model.
std::pair<double, double> time_with_and_without_checkpointing(const std::function<void(bool)>& set_checkpointing,
                                                              const std::function<void()>& step);

/// Times of the model's slice built under a parallel context, on `replicas` times the one-rank
/// calibration's samples: (plain, with checkpointing).
using SliceTimer = std::function<std::pair<double, double>(const parallel::ParallelContext& parallel, int replicas)>;

/// Sets `space.tp_scale`/`tp_checkpoint_factor` and `sp_scale`/`sp_checkpoint_factor` for every
/// tensor- and sequence-parallel (all_to_all) size that divides the world and that `is_valid`
/// accepts: `time_slice` runs the same slice as the one-rank calibration (`plain_s`: its
/// slowest-rank time) in the context of a CPU hybrid plugin at that size, the other ranks data
/// parallel, on `size` times its samples (what a replica of that size gets when the global batch
/// stays the same). Collective.
void calibrate_model_parallel(const std::function<bool(const Layout&)>& is_valid, const SliceTimer& time_slice,
                              double plain_s, SearchSpace& space);

}  // namespace colossal::tools
