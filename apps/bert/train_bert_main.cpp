// The train_bert binary: the job is apps/bert/train_bert.cpp's function.
#include "apps/bert/train_bert.h"

int main(int argc, char** argv) {
  return colossal::apps::run_training_main("train_bert", argc, argv, &colossal::bert_app::train_bert);
}
