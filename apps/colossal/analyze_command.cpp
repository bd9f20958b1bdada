#include "apps/colossal/analyze_command.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <iostream>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/tools/model_analysis.h"
#include "llama/config.h"
#include "llama/shapes.h"
#include "vit/config.h"

namespace colossal::apps {
namespace {

// The model_type decides which family's reader validates the file.
tools::ModelSpec read_spec(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[analyze] cannot read '", path, "'");
  nlohmann::json j;
  try {
    in >> j;
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[analyze] '", path, "' is not valid JSON: ", e.what());
  }
  COLOSSAL_CHECK(j.is_object(), "[analyze] '", path, "': expected a JSON object (a config.json)");
  const std::string type = j.value("model_type", std::string("llama"));
  if (type == "vit") return vit::model_spec(vit::ViTConfig::from_json_file(path));
  const auto& decoders = llama::LlamaConfig::families();
  if (std::find(decoders.begin(), decoders.end(), type) != decoders.end())
    return llama::model_spec(llama::LlamaConfig::from_json_file(path));
  COLOSSAL_FAIL("[analyze] '", path, "': model_type '", type, "' is not one we model (",
                llama::LlamaConfig::family_list(), ", vit)");
}

}  // namespace

CLI::App* add_analyze_command(CLI::App& app, AnalyzeArgs& a) {
  auto* cmd = app.add_subcommand(
      "analyze", "parameters by module, FLOPs per token, model-state memory per rank for every plugin and layout, "
                 "activation memory per layer with and without checkpointing");
  cmd->add_option("--model_config", a.model_config, "a Hugging Face config.json (llama, mistral, mixtral, vit)")->required();
  cmd->add_option("--seq", a.sequence, "tokens per sample (ViT: ignored, the patches are)")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", a.batch, "samples per micro-batch")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--precision", a.precision, "fp32, bf16 or fp16")->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  cmd->add_option("--world", a.world_sizes, "world sizes to list layouts for")->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--json", a.json_out, "also write the analysis as JSON to this file");
  return cmd;
}

int run_analyze(const AnalyzeArgs& a) {
  const auto spec = read_spec(a.model_config);
  tools::AnalysisOptions o;
  o.sequence = a.sequence;
  o.micro_batch = a.batch;
  o.precision = a.precision;
  o.world_sizes = a.world_sizes;
  std::cout << tools::format_analysis(spec, o);
  if (!a.json_out.empty()) {
    checkpoint::write_text_atomically(a.json_out, tools::analysis_json(spec, o).dump(2) + "\n");
    std::cout << "\nwrote " << a.json_out << "\n";
  }
  return 0;
}

}  // namespace colossal::apps
