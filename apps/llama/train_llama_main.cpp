// The train_llama binary: the job is apps/llama/train_llama.cpp's function.
#include "apps/llama/train_llama.h"

int main(int argc, char** argv) {
  return colossal::apps::run_training_main("train_llama", argc, argv, [](const std::vector<std::string>& args) {
    return colossal::llama_app::train_llama(args);
  });
}
