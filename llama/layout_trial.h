#pragma once
// What --plugin auto needs from the LLaMA side: which layouts the model allows, the plugin
// configuration of a layout, and a trial that times real training steps of one.
#include <cstdint>

#include "core/booster/plugin_config.h"
#include "core/tools/layout_search.h"
#include "core/tools/model_analysis.h"
#include "llama/config.h"

namespace colossal::llama {

/// The layout's sizes divide the world and satisfy the model's rules (check_parallel: heads and
/// kv heads by tp, layers by pp, the sequence by sp...).
bool layout_is_valid(const LlamaConfig& config, const tools::Layout& layout, int world, int64_t sequence);

/// The plugin configuration that runs `layout`, on top of `base` (device, the user's options).
booster::PluginConfig plugin_config_for(const tools::Layout& layout, const booster::PluginConfig& base);

struct TrialOptions {
  int warmup_steps = 1;
  int steps = 2;
  int64_t sequence = 256;
  uint64_t seed = 0;
};

/// Builds the model under `layout` (fresh weights, random tokens), runs warm-up and timed steps
/// and returns the median seconds per step, the slowest rank's (every rank calls it).
double time_training_steps(const LlamaConfig& config, const tools::Layout& layout, const booster::PluginConfig& base,
                           const TrialOptions& options);

/// Times a small slice of the model (two of its layers, a small vocabulary) forward and backward
/// on this rank, with and without activation checkpointing, at `tokens` tokens, and sets
/// `space.compute_scale` (measured against the FLOP count at the measured matmul rate) and
/// `space.checkpoint_factor`. Collective: the slowest rank's times are used.
void calibrate_compute(const LlamaConfig& config, int64_t tokens, const tools::MachineRates& rates, tools::SearchSpace& space);

}  // namespace colossal::llama
