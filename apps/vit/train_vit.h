#pragma once
// train_vit as a function: the binary's main() (train_vit_main.cpp) and colossal.vit.train in
// Python run this with the same command-line arguments (apps/vit/train_args.h lists them).
#include <string>
#include <vector>

#include "apps/common/app_entry.h"

namespace colossal::vit_app {

/// Trains (or, with --predict, classifies) as the command line says. Joins the job unless the
/// caller already has, and then leaves the runtime to the caller. Throws on every error;
/// Interrupted when the installed interrupt check fires. Metrics: loss, acc (the last logged
/// window), eval_top1, eval_top5, steps; outputs: model.
apps::RunSummary train_vit(const std::vector<std::string>& args);

}  // namespace colossal::vit_app
