#pragma once
// colossal plot: PNG charts of a training app's --log_file (JSON lines), one per metric.
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace colossal::apps {

struct PlotArgs {
  std::string log_file;
  std::string out_dir;  // default: beside the log, <log>_plots/
  std::vector<std::string> metrics = {"loss", "lr", "tokens/s", "mem_gib"};
};

CLI::App* add_plot_command(CLI::App& app, PlotArgs& args);
int run_plot(const PlotArgs& args);

}  // namespace colossal::apps
