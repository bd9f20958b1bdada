#include "apps/sora/train_sora.h"

int main(int argc, char** argv) {
  return colossal::apps::run_training_main("train_sora", argc, argv, &colossal::sora_app::train_sora);
}
