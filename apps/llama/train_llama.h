#pragma once
// train_llama as a function: the binary's main() (train_llama_main.cpp) and colossal.llama.train
// in Python run this with the same command-line arguments (apps/llama/train_args.h lists them).
#include <string>
#include <vector>

#include "apps/common/app_entry.h"
#include "apps/llama/grpo_task.h"

namespace colossal::llama_app {

/// Trains as the command line says. Joins the job (dist::init) unless the caller already has,
/// and then leaves the runtime to the caller. Throws on every error; Interrupted when the
/// installed interrupt check fires (core/common/interrupt.h). Metrics: loss (the last logged),
/// eval_loss (the last evaluation), steps; outputs: model, checkpoints, tokenizer.
/// `reward`: --mode grpo's reward function (empty: exact match against each prompt's answer).
apps::RunSummary train_llama(const std::vector<std::string>& args, const RewardFunction& reward = {});

}  // namespace colossal::llama_app
