#pragma once
// --load_checkpoint for every training application: a checkpoint (root or step directory),
// "auto" (the default: the newest complete checkpoint in the save directory, if there is one, so
// a job restarted by `colossal run --max_restarts` continues where it last saved) or "none".
#include <cstdint>
#include <functional>
#include <string>

#include "core/booster/booster.h"

namespace colossal::apps {

struct ResumeChoice {
  std::string checkpoint;  // empty: start from scratch
  bool automatic = false;  // found by "auto"
};

/// Resolves the flag on every rank alike: the ranks must all see the save directory the same
/// way (a checkpoint visible to some ranks only is an error naming the directory).
ResumeChoice resolve_resume(const std::string& flag, const std::string& save_dir);

struct ResumeOptions {
  int64_t total_steps = 0;     // of the run
  std::string length_flags;    // what raises total_steps, for the "nothing left" line
  // State the application keeps outside the model (sharded tables): loaded from the step
  // directory before the Booster's checkpoint.
  std::function<void(const std::string& step_dir)> load_rank_state;
};

/// Loads the resolved checkpoint into `boosted` and says so (rank 0), including when nothing is
/// left to train. Returns the first step to run (1 when starting over).
int64_t resume_from(booster::Booster& booster, booster::Boosted& boosted, const ResumeChoice& resume,
                    const ResumeOptions& options);

}  // namespace colossal::apps
