#include "apps/common/plugin_flags.h"

#include <map>

#include <cstdio>
#include <cstring>
#include <stdexcept>

#include "core/booster/registry.h"
#include "apps/common/settings.h"
#include "core/common/check.h"

namespace colossal::apps {

namespace {

// Each plugin option once, with the plugins that take it: "zero, hybrid: ZeRO stage ...".
std::vector<std::pair<std::string, std::string>> plugin_option_flags() {
  std::vector<std::string> order;
  std::map<std::string, std::pair<std::string, std::string>> by_key;  // key -> (plugins, help of the first)
  for (const auto& p : booster::plugin_infos())
    for (const auto& o : p.options) {
      auto [it, fresh] = by_key.try_emplace(o.name, p.name, o.help);
      if (fresh) order.push_back(o.name);
      else it->second.first += ", " + p.name;
    }
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& key : order)
    out.push_back({key, by_key[key].first + ": " + by_key[key].second + " (--plugin help: defaults)"});
  return out;
}

}  // namespace

std::vector<std::string> plugin_keys() {
  std::vector<std::string> keys;
  for (const auto& o : list_options(booster::PluginConfig{})) {
    keys.push_back(o.name);
    if (!o.alias.empty()) keys.push_back(o.alias);
  }
  for (const auto& [key, help] : plugin_option_flags()) keys.push_back(key);
  return keys;
}

void PluginFlags::add_to(CLI::App& app, booster::PluginConfig& config) {
  CliBinder binder(app);
  config.visit(binder);
  const auto flags = plugin_option_flags();
  flags_.clear();
  flags_.reserve(flags.size());
  for (const auto& [key, help] : flags) {
    flags_.push_back({key, "", nullptr});
    auto& f = flags_.back();
    f.option = app.add_option("--" + key, f.value, help);
  }
  app.add_option("--plugin_option", plugin_options_, "any plugin option, KEY=VALUE (repeatable; see --plugin help)");
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
