#include "apps/common/resume.h"

#include <torch/torch.h>

#include <cstdio>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::apps {

ResumeChoice resolve_resume(const std::string& flag, const std::string& save_dir) {
  ResumeChoice out;
  if (flag == "none") return out;
  if (flag != "auto") {
    out.checkpoint = flag;
    return out;
  }
  out.automatic = true;
  out.checkpoint = booster::Booster::latest_checkpoint(save_dir).value_or("");
  if (dist::is_initialized() && dist::world_size() > 1) {
    auto seen = torch::tensor({out.checkpoint.empty() ? 0.0 : 1.0});
    dist::all_reduce(seen, dist::world_group(), dist::ReduceOp::kSum);
    const double ranks = seen.item<double>();
    COLOSSAL_CHECK(ranks == 0 || ranks == dist::world_size(), "--load_checkpoint auto: ", ranks, " of ",
                   dist::world_size(), " ranks find a checkpoint in ", save_dir,
                   "; the save directory must be shared by every rank (or pass --load_checkpoint none or a path)");
  }
  return out;
}

int64_t resume_from(booster::Booster& booster, booster::Boosted& boosted, const ResumeChoice& resume,
                    const ResumeOptions& options) {
  if (resume.checkpoint.empty()) return 1;
  // The application's own state first: a checkpoint of another layout is named for what it is.
  if (options.load_rank_state) options.load_rank_state(booster::Booster::step_directory(resume.checkpoint));
  const auto state = booster.load_checkpoint(boosted, resume.checkpoint);
  const bool talk = !dist::is_initialized() || dist::rank() == 0;
  if (talk) {
    std::printf("resumed: %s at step %ld (epoch %ld)%s\n", resume.checkpoint.c_str(), state.step, state.epoch,
                resume.automatic ? " (--load_checkpoint auto; --load_checkpoint none starts over)" : "");
    if (state.step >= options.total_steps) {
      std::printf("nothing left to train: the checkpoint is at step %ld of %ld (raise %s, or --load_checkpoint none "
                  "to start over)\n", state.step, options.total_steps, options.length_flags.c_str());
    }
  }
  return state.step + 1;
}

}  // namespace colossal::apps
