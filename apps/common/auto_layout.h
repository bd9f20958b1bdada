#pragma once
// --plugin auto, shared by the training apps: measure this machine, rank every valid layout with
// the cost model, time the best few for real and return the fastest measured. The table goes to
// the log (rank 0), the full report (every candidate, predicted and measured) to a JSON file.
#include <functional>
#include <string>

#include "core/booster/plugin_config.h"
#include "core/common/options.h"
#include "core/tools/layout_search.h"

namespace colossal::apps {

/// The flags --plugin auto adds to every training app (and the same keys in its --config file).
struct AutoLayoutFlags {
  int trials = 3;         // --auto_trials: best-predicted layouts timed for real
  double budget_s = 120;  // --auto_budget_s: seconds of trial steps (the first trial always runs)
  std::string report;     // --auto_report: the JSON report (empty: the app's output directory)
  template <class V>
  void visit(V& v) {
    v("auto_trials", trials, "--plugin auto: best-predicted layouts timed for real", at_least(1));
    v("auto_budget_s", budget_s, "--plugin auto: seconds of trial steps (the first trial always runs)", at_least(0));
    v("auto_report", report, "--plugin auto: the JSON report (default: auto_layout.json in the output directory)");
  }
};

struct AutoLayoutOptions {
  int64_t global_batch = 1;       // samples per optimizer step over every replica
  int64_t sequence = 0;
  std::string precision = "fp32";
  int trials = 3;
  double budget_s = 120;          // --auto_budget_s: time for trials (the first always runs)
  std::string report_path;        // the JSON report
};

tools::SelectionReport choose_layout(const tools::ModelSpec& spec, const AutoLayoutOptions& options,
                                     const std::function<bool(const tools::Layout&)>& is_valid,
                                     const std::function<double(const tools::Layout&)>& trial,
                                     const std::function<void(const tools::MachineRates&, tools::SearchSpace&)>& calibrate = nullptr);

/// The winner's plugin configuration on top of the user's (tools::plugin_config_for: the user's
/// plugin options kept where the winner takes them); rank 0 notes the ones it does not take.
booster::PluginConfig chosen_plugin_config(const tools::Layout& best, const booster::PluginConfig& user);

}  // namespace colossal::apps
