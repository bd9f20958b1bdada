#pragma once
// An application's settings from one declaration (core/common/options.h): the struct's visit()
// lists every setting once, and this file derives the rest from it — the CLI11 flags with their
// help (default and accepted values included), the keys of a --config file (YAML or JSON), the
// range checks, and the error for a key nothing declares.
//
//   struct TrainArgs {
//     int64_t batch_size = 512;
//     TrainLoopOptions loop;             // the training loop's own settings
//     booster::PluginConfig plugin;      // --plugin, the layout and every plugin option
//     std::string config;                // the --config file, if any
//     template <class V> void visit(V& v) {
//       v("batch_size", batch_size, "samples per step over all ranks", at_least(1));
//       loop.visit(v);
//     }
//     void validate() const;             // what involves two settings at once
//   };
//   if (!apps::parse_settings(argc, argv, "Train a recommender", args, exit_code)) return;  // --help
//
// Flags given on the command line win over the file's keys.
#include <CLI/CLI.hpp>

#include <string>
#include <type_traits>
#include <vector>

#include "apps/common/cli_binder.h"
#include "apps/common/plugin_flags.h"
#include "core/booster/plugin_config.h"
#include "core/common/config.h"
#include "core/common/options.h"

namespace colossal::apps {

/// The declared keys of `settings` (names and aliases).
template <typename Settings>
std::vector<std::string> setting_names(const Settings& settings) {
  std::vector<std::string> out;
  for (const auto& o : list_options(settings)) {
    out.push_back(o.name);
    if (!o.alias.empty() && o.alias[0] != '!') out.push_back(o.alias);
  }
  return out;
}

/// Throws for a key of `node` that neither `declared` nor the plugins know, listing the declared
/// ones (the plugins' own options: --plugin help).
void reject_unknown_keys(const ConfigNode& node, const std::vector<std::string>& declared, const std::string& program);

/// Parses argv into `settings` (and settings.plugin, settings.config): the --config file first,
/// then the flags. Returns false when the program should exit with `exit_code` (--help, --version,
/// --plugin help). Range errors name the flag; a bad flag throws std::invalid_argument.
template <typename Settings>
bool parse_settings(int argc, char** argv, const std::string& description, Settings& s, int& exit_code) {
  s.config = config_argument(argc, argv);
  if (!s.config.empty()) {
    auto c = ConfigNode::load_file(s.config);
    read_options(s, c);
    std::string program = argc > 0 ? argv[0] : "this program";
    program = program.substr(program.find_last_of('/') + 1);
    reject_unknown_keys(c, setting_names(s), program);
    s.plugin.read(c);  // the layout, precision, device and every plugin option
    c.check_all_keys_used();
  }
  CLI::App app{description};
  app.add_option("--config", s.config, "YAML or JSON file with any of these settings (flags override it)");
  CliBinder binder(app);
  s.visit(binder);
  PluginFlags plugin_flags;
  plugin_flags.add_to(app, s.plugin);
  if (!parse_job_flags(app, argc, argv, plugin_flags, s.plugin, exit_code)) return false;
  validate_options(s);
  validate_options(s.plugin);
  s.validate();
  return true;
}

}  // namespace colossal::apps
