#include "apps/common/verify_run.h"

#include <cstdio>

#include "core/common/check.h"
#include "core/common/env.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"

namespace colossal::apps {

std::optional<VerifyRun> VerifyRun::from_env() {
  auto record = booster::StepRecorder::options_from_env();
  if (!record) return std::nullopt;
  VerifyRun v;
  v.record = *record;
  v.reference_for = static_cast<int>(env_int("COLOSSAL_VERIFY_REFERENCE_FOR").value_or(0));
  return v;
}

int64_t VerifyRun::adapt(booster::PluginConfig& plugin) const {
  // The reference must run the layout's global batch, which --plugin auto decides only by timing.
  COLOSSAL_CHECK(plugin.name != "auto", "colossal verify: --plugin auto chooses its layout by timing trials; ",
                 "verify the layout it chose instead (the winner's flags are in its report and log)");
  if (reference_for <= 0) return 1;
  COLOSSAL_CHECK(dist::world_size() == 1, "the one-process reference of colossal verify runs on one rank, not ",
                 dist::world_size());
  // The layout's replicas, as its own run resolves them (validated there already).
  const int replicas = dist::ParallelDims(plugin.layout, reference_for).dp();
  booster::PluginConfig one;
  one.name = "ddp";
  one.precision = plugin.precision;
  one.device = plugin.device;
  plugin = one;
  return replicas;
}

booster::StepRecorder VerifyRun::recorder(const booster::Plugin& plugin, const std::string& precision) const {
  auto o = record;
  o.layout = plugin.name() + " (" + plugin.dims().describe() + ")";
  o.precision = precision;
  return booster::StepRecorder(o);
}

}  // namespace colossal::apps
