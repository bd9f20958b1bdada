#include "apps/common/auto_layout.h"

#include <nlohmann/json.hpp>

#include <cstdio>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/runtime.h"
#include "core/tools/layout_trial.h"

namespace colossal::apps {

tools::SelectionReport choose_layout(const tools::ModelSpec& spec, const AutoLayoutOptions& o,
                                     const std::function<bool(const tools::Layout&)>& is_valid,
                                     const std::function<double(const tools::Layout&)>& trial,
                                     const std::function<void(const tools::MachineRates&, tools::SearchSpace&)>& calibrate) {
  tools::SearchSpace space;
  space.world = dist::world_size();
  space.global_batch = o.global_batch;
  space.sequence = o.sequence;
  space.precision = o.precision;
  const auto rates = tools::measure_rates(&spec);
  if (calibrate) calibrate(rates, space);
  auto layouts = tools::enumerate_layouts(spec, space, is_valid);
  COLOSSAL_CHECK(!layouts.empty(), "--plugin auto: no layout of ", space.world, " ranks fits a global batch of ",
                 o.global_batch, " samples and the model's rules; change --batch_size");
  auto ranked = tools::rank_layouts(spec, layouts, rates, space);
  if (dist::rank() == 0) {
    std::printf("--plugin auto: %zu layouts for %d ranks, global batch %ld x %ld tokens; timing the best %d (budget %.0f s)\n",
                ranked.size(), space.world, o.global_batch, o.sequence, o.trials, o.budget_s);
    std::fflush(stdout);
  }
  auto report = tools::select_layout(std::move(ranked), trial, {.trials = o.trials, .budget_s = o.budget_s});
  report.rates = rates;
  if (dist::rank() == 0) {
    std::printf("%s", report.format().c_str());
    if (!o.report_path.empty()) {
      checkpoint::write_text_atomically(o.report_path, report.to_json().dump(2) + "\n");
      std::printf("layout report: %s\n", o.report_path.c_str());
    }
    std::fflush(stdout);
  }
  return report;
}

booster::PluginConfig chosen_plugin_config(const tools::Layout& best, const booster::PluginConfig& user) {
  std::vector<std::string> dropped;
  auto config = tools::plugin_config_for(best, user, &dropped);
  if (!dropped.empty() && dist::rank() == 0)
    std::printf("note: --plugin auto chose %s, which does not take these options; left out: %s\n", best.plugin.c_str(),
                c10::Join(", ", dropped).c_str());
  return config;
}

}  // namespace colossal::apps
