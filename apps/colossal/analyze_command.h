#pragma once
// colossal analyze: what a model costs before it runs (core/tools/model_analysis.h).
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace colossal::apps {

struct AnalyzeArgs {
  std::string model_config;  // a Hugging Face config.json (llama, mistral, mixtral, vit)
  std::string json_out;      // also write the analysis as JSON here
  int64_t sequence = 2048;
  int64_t batch = 1;
  std::string precision = "bf16";
  std::vector<int> world_sizes = {1, 2, 4, 8};
};

CLI::App* add_analyze_command(CLI::App& app, AnalyzeArgs& args);
int run_analyze(const AnalyzeArgs& args);

}  // namespace colossal::apps
