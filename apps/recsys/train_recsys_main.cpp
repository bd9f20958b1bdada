// The train_recsys binary: the job is apps/recsys/train_recsys.cpp's function.
#include "apps/recsys/train_recsys.h"

int main(int argc, char** argv) {
  return colossal::apps::run_training_main("train_recsys", argc, argv, &colossal::recsys_app::train_recsys);
}
