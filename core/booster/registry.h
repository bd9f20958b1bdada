#pragma once
// The plugin registry: every plugin by name, built from one PluginConfig (plugin_config.h), so
// every application reaches every plugin and every plugin option the same way:
//
//   booster::PluginConfig c;                 // or c.read(config file) and c.set(flag, text)
//   c.name = "hybrid";
//   c.layout.tp = 2;
//   c.options["zero_stage"] = 1;
//   auto plugin = booster::make_plugin(c);   // the layout validated, its groups ready to build
//
// Adding a plugin: one folder in core/booster/plugins/ and one line in registry.cpp.
#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "core/booster/plugin.h"
#include "core/booster/plugin_config.h"
#include "core/common/options.h"

namespace colossal::booster {

struct PluginInfo {
  std::string name;
  std::string summary;
  std::vector<OptionInfo> options;  // the plugin's own options, with defaults
  bool splits_model = false;        // takes tp / sp (and later pp / ep) above 1
};

/// Builds the plugin `config.name` with the layout, precision, device and options of `config`.
/// Errors name what is wrong: an unknown plugin (listing the known ones), an option the plugin
/// does not have (naming the key, where it came from, and the plugin's options), a value of the
/// wrong type, a layout the plugin cannot run.
std::shared_ptr<Plugin> make_plugin(const PluginConfig& config);
/// Shorthand: a plugin by name with default options and the given precision.
std::shared_ptr<Plugin> make_plugin(const std::string& name, const std::string& precision = "fp32");

std::vector<std::string> plugin_names();
std::vector<PluginInfo> plugin_infos();
/// What `--plugin help` prints: every plugin, its options and their defaults, the layout flags.
std::string plugins_help();

/// "auto": CUDA when a GPU is visible (rank -> LOCAL_RANK's GPU), else the CPU; "cpu"; "cuda"
/// (LOCAL_RANK's GPU); "cuda:N". Throws when CUDA is asked for and there is none.
c10::Device resolve_device(const std::string& device);

}  // namespace colossal::booster
