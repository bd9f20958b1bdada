#pragma once
// train_recsys as a function: the binary's main() (train_recsys_main.cpp) and, later, the
// Python module run this with the same command-line arguments (apps/recsys/train_args.h).
#include <string>
#include <vector>

#include "apps/common/app_entry.h"

namespace colossal::recsys_app {

/// Trains as the command line says. Joins the job unless the caller already has. Throws on every
/// error. Metrics: loss (the last logged), eval_auc, eval_log_loss, steps; outputs: checkpoints, log.
apps::RunSummary train_recsys(const std::vector<std::string>& args);

}  // namespace colossal::recsys_app
