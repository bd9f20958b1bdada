#pragma once
// What --plugin auto needs from the LLaMA side: which layouts the model allows, a trial that
// times real training steps of one, and the start-up calibration from a slice of the model. The
// parts every model shares are in core/tools/layout_trial.h.
#include <cstdint>

#include "core/booster/plugin_config.h"
#include "core/tools/layout_search.h"
#include "core/tools/layout_trial.h"
#include "llama/config.h"

namespace colossal::llama {

/// The layout's sizes divide the world and satisfy the model's rules (check_parallel: heads and
/// kv heads by tp, layers by pp, the sequence by sp...).
bool layout_is_valid(const LlamaConfig& config, const tools::Layout& layout, int world, int64_t sequence);

/// Builds the model under `layout` (fresh weights, random tokens of options.sequence), runs
/// warm-up and timed steps and returns the median seconds per step, the slowest rank's (every
/// rank calls it).
double time_training_steps(const LlamaConfig& config, const tools::Layout& layout, const booster::PluginConfig& base,
                           const tools::TrialOptions& options);

/// Times a small slice of the model (two of its layers, a small vocabulary) forward and backward
/// on this rank, with and without activation checkpointing, at `tokens` tokens, and calibrates
/// `space` from it (tools::calibrate_from_slice). Collective.
void calibrate_compute(const LlamaConfig& config, int64_t tokens, const tools::MachineRates& rates, tools::SearchSpace& space);

}  // namespace colossal::llama
