#include "apps/llama/train_args.h"

#include "apps/common/settings.h"
#include "core/common/check.h"

namespace colossal::llama_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(pretrained.empty() || model_config.empty(),
                 "--pretrained and --model_config both given: the model's shape comes from one of them");
  if (mode == "dpo") preference.validate();
}

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  return apps::parse_settings(
      argc, argv, "Train a LLaMA-style model (default: a small one on Jane Austen's novels, then generate from it)", a,
      exit_code);
}

}  // namespace colossal::llama_app
