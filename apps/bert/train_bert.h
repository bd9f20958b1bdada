#pragma once
// train_bert as a function: the binary's main() (train_bert_main.cpp) and colossal.bert.train in
// Python run this with the same command-line arguments (apps/bert/train_args.h lists them).
#include <string>
#include <vector>

#include "apps/common/app_entry.h"

namespace colossal::bert_app {

/// Trains (or, with --predict, classifies) as the command line says. Metrics: loss, acc (the
/// last logged window), eval_loss, eval_acc, steps; outputs: model.
apps::RunSummary train_bert(const std::vector<std::string>& args);

}  // namespace colossal::bert_app
