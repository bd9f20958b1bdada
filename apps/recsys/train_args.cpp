#include "apps/recsys/train_args.h"

#include "apps/common/settings.h"
#include "core/common/check.h"

namespace colossal::recsys_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(offload_dir.empty() || cache_ratio > 0 || sharding != "none", "--offload_dir holds cached or "
                 "sharded tables: add --cache_ratio or --sharding");
}

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  return apps::parse_settings(argc, argv, "Train a recommender (default: DLRM on MovieLens ratings as clicks, split by time)",
                              a, exit_code);
}

}  // namespace colossal::recsys_app
