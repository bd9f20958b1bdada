#pragma once
// The library behind `colossal verify`: runs a training program's first steps under the layout
// the user gave (through the launcher, like colossal run) and again as one process on the same
// global batch, then reports the largest difference of loss, gradients and parameters per step
// (core/booster/verify_report.h). The program records its steps itself when the environment asks
// (core/booster/step_recorder.h; train_llama does).
#include <string>

#include "core/booster/verify_report.h"
#include "core/launch/launcher.h"

namespace colossal::launch {

struct VerifyOptions {
  LaunchOptions launch;        // the layout run (nproc_per_node, command, ...); one node only
  int64_t steps = 3;           // recorded and compared
  std::string work_dir;        // recordings; empty: a new directory under $TMPDIR, removed after
  bool keep = false;           // keep work_dir's recordings
  booster::VerifyTolerances tolerances;

  void validate() const;
};

/// Runs both, prints both runs' output (rank 0's unless launch.tee says otherwise) and the
/// report; returns 0 when the layout matches, 1 when it does not, 2 when a run failed.
int verify(const VerifyOptions& options);

}  // namespace colossal::launch
