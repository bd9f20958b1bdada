#include "apps/common/plugin_flags.h"

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/booster/registry.h"
#include "core/common/check.h"

namespace colossal::apps {

const std::vector<std::pair<std::string, std::string>>& job_flags() {
  // key, help. The keys are PluginConfig's and the plugins' option names.
  static const std::vector<std::pair<std::string, std::string>> flags = {
      {"plugin", "ddp | zero | zero1 | zero2 | gemini (= zero3) | hybrid | auto (chosen by measurement); 'help' lists every "
                 "plugin's options"},
      {"mixed_precision", "fp32 | bf16 | fp16"},
      {"device", "auto (cuda when a GPU is visible, rank -> LOCAL_RANK's GPU) | cpu | cuda | cuda:N"},
      {"tp", "tensor-parallel size (hybrid)"},
      {"sp", "sequence-parallel size (hybrid)"},
      {"sp_mode", "none | split_gather | all_to_all | ring_attn (hybrid)"},
      {"dp", "data-parallel size (default: the rest of the world)"},
      {"pp", "pipeline-parallel size (hybrid)"},
      {"pp_schedule", "hybrid, pp > 1: gpipe | 1f1b | interleaved | zbh1 | zbv"},
      {"num_model_chunks", "hybrid, pp > 1: model chunks per stage (interleaved >= 2, zbv 2)"},
      {"num_microbatches", "hybrid, pp > 1: microbatches per step (0: pp x num_model_chunks)"},
      {"microbatch_size", "hybrid, pp > 1: samples per microbatch (instead of --num_microbatches)"},
      {"pp_balance", "hybrid, pp > 1: layers per stage by cost (embedding and head counted) | count"},
      {"ep", "hybrid, a MoE model: expert-parallel size (shares the experts out over the data-parallel ranks)"},
      {"zero_stage", "zero / hybrid: ZeRO stage (hybrid: 0 = DDP)"},
      {"bucket_mib", "ddp / zero / hybrid: gradient bucket size in MiB"},
      {"placement", "gemini: static | auto"},
      {"offload_optim_frac", "gemini: fraction of chunks whose optimizer state is offloaded"},
      {"offload_param_frac", "gemini: fraction of chunks whose parameters are offloaded"},
      {"offload_device", "gemini: cpu | nvme"},
      {"nvme_dir", "gemini: directory for the NVMe offload files"},
      {"gathered_budget_mib", "gemini (auto placement): memory for gathered chunks in MiB"},
  };
  return flags;
}

void PluginFlags::add_to(CLI::App& app, const std::string& default_plugin) {
  const auto& flags = job_flags();
  flags_.clear();
  flags_.reserve(flags.size());
  for (const auto& [key, help] : flags) {
    flags_.push_back({key, "", nullptr});
    auto& f = flags_.back();
    std::string names = "--" + key;
    if (key == "mixed_precision") names += ",--precision";
    f.option = app.add_option(names, f.value, key == "plugin" ? help + " (default " + default_plugin + ")" : help);
  }
  plugin_option_flag_ = app.add_option("--plugin_option", plugin_options_,
                                       "any other plugin option, KEY=VALUE (repeatable; see --plugin help)");
}

void PluginFlags::apply(booster::PluginConfig& config) const {
  for (const auto& f : flags_)
    if (f.option && f.option->count() > 0) config.set(f.key, f.value, "flag --" + f.key);
  for (const auto& kv : plugin_options_) {
    auto eq = kv.find('=');
    COLOSSAL_CHECK(eq != std::string::npos && eq > 0, "--plugin_option '", kv, "': expected KEY=VALUE");
    config.set(kv.substr(0, eq), kv.substr(eq + 1), "flag --plugin_option " + kv);
  }
}

std::string config_argument(int argc, char** argv) {
  std::string path;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--config") == 0) path = argv[i + 1];
  return path;
}

bool parse_job_flags(CLI::App& app, int argc, char** argv, const PluginFlags& flags, booster::PluginConfig& plugin,
                     int& exit_code) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() != 0) throw std::invalid_argument(std::string(e.what()) + " (--help lists the flags)");
    exit_code = app.exit(e);
    return false;
  }
  flags.apply(plugin);
  if (plugin.name == "help") {
    std::fputs(booster::plugins_help().c_str(), stdout);
    exit_code = 0;
    return false;
  }
  return true;
}

}  // namespace colossal::apps
