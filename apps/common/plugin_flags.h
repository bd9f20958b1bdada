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

}  // namespace colossal::apps
