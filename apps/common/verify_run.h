#pragma once
// A training application under `colossal verify`: it records its first steps
// (core/booster/step_recorder.h) and stops. colossal verify runs it twice: once with the layout
// the user gave, once as the one-process reference, which runs the layout's whole global batch
// (every data-parallel replica's samples) in one process with DDP, the same precision and device.
//
// The environment colossal verify sets (besides the recorder's COLOSSAL_VERIFY_DIR and _STEPS):
//   COLOSSAL_VERIFY_REFERENCE_FOR=N   this run is the reference of a layout over N ranks
#include <cstdint>
#include <optional>

#include "core/booster/plugin.h"
#include "core/booster/plugin_config.h"
#include "core/booster/step_recorder.h"

namespace colossal::apps {

struct VerifyRun {
  booster::StepRecorderOptions record;
  int reference_for = 0;  // > 0: the one-process reference of a layout over this many ranks

  /// The run colossal verify asked for; nullopt when the app runs on its own.
  static std::optional<VerifyRun> from_env();

  /// In the reference run: rewrites `plugin` to one process (DDP, the layout's precision and
  /// device, no plugin options) and returns how many data-parallel replicas the layout has: the
  /// factor the per-rank batch grows by, so one process sees every replica's samples. In the
  /// layout run: leaves `plugin` alone and returns 1.
  int64_t adapt(booster::PluginConfig& plugin) const;

  /// The recorder of this run, with `plugin`'s layout and `precision` in its files.
  booster::StepRecorder recorder(const booster::Plugin& plugin, const std::string& precision) const;
};

}  // namespace colossal::apps
