#pragma once
// --load_checkpoint for every training application: a checkpoint (root or step directory),
// "auto" (the default: the newest complete checkpoint in the save directory, if there is one, so
// a job restarted by `colossal run --max_restarts` continues where it last saved) or "none".
#include <string>

namespace colossal::apps {

struct ResumeChoice {
  std::string checkpoint;  // empty: start from scratch
  bool automatic = false;  // found by "auto"
};

/// Resolves the flag on every rank alike: the ranks must all see the save directory the same
/// way (a checkpoint visible to some ranks only is an error naming the directory).
ResumeChoice resolve_resume(const std::string& flag, const std::string& save_dir);

}  // namespace colossal::apps
