#pragma once
// What --plugin auto needs from the ViT side: which layouts the model allows, a trial that times
// real training steps of one, and the start-up calibration from a slice of the model (the shared
// parts: core/tools/layout_trial.h).
#include <cstdint>

#include "core/booster/plugin_config.h"
#include "core/tools/layout_search.h"
#include "core/tools/layout_trial.h"
#include "vit/config.h"

namespace colossal::vit {

/// The layout's sizes divide the world and satisfy ViT's rules (check_parallel: heads and the MLP
/// by tp, layers by pp, no sequence parallelism); train_vit accumulates no gradients, so outside a
/// pipeline a replica's batch is one micro-batch.
bool layout_is_valid(const ViTConfig& config, const tools::Layout& layout, int world);

/// Builds the model under `layout` (fresh weights, random images and labels), runs warm-up and
/// timed steps and returns the median seconds per step, the slowest rank's (every rank calls it).
double time_training_steps(const ViTConfig& config, const tools::Layout& layout, const booster::PluginConfig& base,
                           const tools::TrialOptions& options);

/// Times a two-layer slice of the model forward and backward on this rank, with and without
/// activation checkpointing, on `images` images, and calibrates `space` from it. Collective.
void calibrate_compute(const ViTConfig& config, int64_t images, const tools::MachineRates& rates, tools::SearchSpace& space);

}  // namespace colossal::vit
