// The train_vit binary: the job is apps/vit/train_vit.cpp's function.
#include "apps/vit/train_vit.h"

int main(int argc, char** argv) {
  return colossal::apps::run_training_main("train_vit", argc, argv, &colossal::vit_app::train_vit);
}
