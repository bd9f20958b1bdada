#pragma once
// The flags every training application shares for composing a job, derived from declarations:
// PluginConfig's general keys (plugin, precision, device, the layout; typed flags bound to the
// config) and every registered plugin's own options (core/booster/registry.h), under the names of
// the config-file keys. A plugin option given as a flag reaches the plugin as text, converted by
// the type that plugin declares. Values given on the command line win over a --config file:
//
//   booster::PluginConfig plugin;           // maybe read from --config first
//   apps::PluginFlags flags;
//   flags.add_to(app, plugin);              // CLI::App
//   app.parse(argc, argv);
//   flags.apply(plugin);                    // the plugin options that were given
//   if (plugin.name == "help") print booster::plugins_help()
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/booster/plugin_config.h"

namespace colossal::apps {

class PluginFlags {
 public:
  /// Binds the general keys to `config` and adds a flag per plugin option.
  void add_to(CLI::App& app, booster::PluginConfig& config);
  /// Sets every plugin-option flag that was given on the command line into `config`.
  void apply(booster::PluginConfig& config) const;

 private:
  struct Flag {
    std::string key;
    std::string value;
    CLI::Option* option = nullptr;
  };
  std::vector<Flag> flags_;                  // stable addresses: reserved before options bind to them
  std::vector<std::string> plugin_options_;  // --plugin_option KEY=VALUE
};

/// Every key a job's plugin configuration takes: PluginConfig's general keys (and their aliases)
/// and every plugin's option names.
std::vector<std::string> plugin_keys();

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
