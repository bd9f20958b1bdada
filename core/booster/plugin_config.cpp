#include "core/booster/plugin_config.h"

#include "core/common/check.h"
#include "core/common/options.h"

namespace colossal::booster {
namespace {

int parse_size(const std::string& text, const std::string& where) {
  auto v = detail::option_value_for(nlohmann::json(text), "int", where);
  return static_cast<int>(v.get<long long>());
}

}  // namespace

void PluginConfig::set(const std::string& key, const std::string& text, const std::string& where) {
  const std::string from = where.empty() ? "'" + key + "'" : where;
  if (key == "plugin") name = text;
  else if (key == "pp") layout.pp = parse_size(text, from);
  else if (key == "dp") layout.dp = parse_size(text, from);
  else if (key == "sp") layout.sp = parse_size(text, from);
  else if (key == "tp") layout.tp = parse_size(text, from);
  else if (key == "ep") layout.ep = parse_size(text, from);
  else if (key == "sp_mode") layout.sp_mode = text;
  else if (key == "tp_mode") layout.tp_mode = text;
  else if (key == "tp_depth") layout.tp_depth = parse_size(text, from);
  else if (key == "fp8_communication")
    layout.fp8_communication = detail::option_value_for(nlohmann::json(text), "bool", from).get<bool>();
  else if (key == "mixed_precision" || key == "precision") precision = text;
  else if (key == "fp8_scaling") fp8_scaling = text;
  else if (key == "device") device = text;
  else {
    options[key] = text;
    origin[key] = from;
  }
}

void PluginConfig::read(const ConfigNode& c) {
  read_options(*this, c);
  for (const auto& key : c.unused_keys()) {
    options[key] = c.raw(key);
    origin[key] = c.describe(key);
    std::string unused;  // marks the key consumed: the plugin, not the file's reader, judges it
    c.read_value(key, nlohmann::json(""), unused);
  }
}

std::string PluginConfig::describe() const {
  std::string s = name + ", " + precision + " on " + device + ", " + layout.describe();
  for (auto it = options.begin(); it != options.end(); ++it)
    s += " " + it.key() + "=" + (it.value().is_string() ? it.value().get<std::string>() : it.value().dump());
  return s;
}

}  // namespace colossal::booster
