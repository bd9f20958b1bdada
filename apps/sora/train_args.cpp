#include "apps/sora/train_args.h"

#include "apps/common/settings.h"
#include "core/common/check.h"

namespace colossal::sora_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(hidden % heads == 0, "--hidden ", hidden, " does not split over --heads ", heads);
}

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  return apps::parse_settings(argc, argv,
                              "train_sora: a video VAE and a spatial-temporal DiT (rectified flow) on real clips", a,
                              exit_code);
}

}  // namespace colossal::sora_app
