#pragma once
// The flags every training application shares for composing a job: the plugin, the layout, the
// precision, the device and the common plugin options, under the names of the config-file keys
// (core/booster/plugin_config.h). Values given on the command line are applied on top of what a
// --config file set:
//
//   booster::PluginConfig plugin;           // maybe read from --config first
//   apps::PluginFlags flags;
//   flags.add_to(app);                      // CLI::App
//   app.parse(argc, argv);
//   flags.apply(plugin);                    // only the flags that were given
//   if (plugin.name == "help") print booster::plugins_help()
#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/booster/plugin_config.h"

namespace colossal::apps {

class PluginFlags {
 public:
  /// `default_plugin` is shown in --help (the application's own default).
  void add_to(CLI::App& app, const std::string& default_plugin = "ddp");
  /// Sets every flag that was given on the command line into `config`.
  void apply(booster::PluginConfig& config) const;

 private:
  struct Flag {
    std::string key;
    std::string value;
    CLI::Option* option = nullptr;
  };
  std::vector<Flag> flags_;               // stable addresses: reserved before options bind to them
  std::vector<std::string> plugin_options_;  // --plugin_option KEY=VALUE
  CLI::Option* plugin_option_flag_ = nullptr;
};

/// The flags PluginFlags adds (key, help): PluginConfig's general keys and the plugins' common
/// options. A config file takes the same keys (and "precision" for "mixed_precision").
const std::vector<std::pair<std::string, std::string>>& job_flags();

/// The --config value among the arguments ("" when absent). Apps read the file before parsing
/// the flags, so flags given on the command line override it (CLI11 leaves absent options as
/// they are).
std::string config_argument(int argc, char** argv);

/// app.parse() with every training app's conventions: --help and --version print and return
/// false (exit_code 0); a bad flag throws std::invalid_argument naming it (the binary prints it,
/// Python raises it); the plugin flags given are applied to `plugin`, and `--plugin help` prints
/// the plugins and returns false.
bool parse_job_flags(CLI::App& app, int argc, char** argv, const PluginFlags& flags, booster::PluginConfig& plugin,
                     int& exit_code);

}  // namespace colossal::apps
