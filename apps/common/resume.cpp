#include "apps/common/resume.h"

#include <torch/torch.h>

#include "core/booster/booster.h"
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

}  // namespace colossal::apps
