#include "apps/bert/train_args.h"

#include "apps/common/settings.h"

namespace colossal::bert_app {

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  return apps::parse_settings(argc, argv,
                              "Fine-tune or train a BERT encoder for text classification or masked language modelling "
                              "(default: which Austen novel a passage comes from), or classify texts with one (--predict)",
                              a, exit_code);
}

}  // namespace colossal::bert_app
