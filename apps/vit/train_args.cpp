#include "apps/vit/train_args.h"

#include "apps/common/settings.h"

namespace colossal::vit_app {

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  return apps::parse_settings(argc, argv,
                              "Train a vision transformer (default: the nano ViT on Fashion-MNIST), or classify "
                              "images with one (--predict)",
                              a, exit_code);
}

}  // namespace colossal::vit_app
