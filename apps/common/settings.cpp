#include "apps/common/settings.h"

#include <set>

#include "core/booster/registry.h"
#include "core/common/check.h"

namespace colossal::apps {

void reject_unknown_keys(const ConfigNode& node, const std::vector<std::string>& declared, const std::string& program) {
  // What the plugin configuration takes: its general keys and any plugin's own options.
  std::set<std::string> plugin_keys = {"precision"};
  for (const auto& [key, help] : job_flags()) plugin_keys.insert(key);
  for (const auto& p : booster::plugin_infos())
    for (const auto& o : p.options) plugin_keys.insert(o.name);
  std::string unknown;
  for (const auto& key : node.unused_keys())
    if (!plugin_keys.count(key)) unknown += (unknown.empty() ? "'" : ", '") + key + "'";
  if (unknown.empty()) return;
  std::string known;
  for (const auto& k : declared) known += (known.empty() ? "" : ", ") + k;
  COLOSSAL_FAIL("[config] ", node.origin(), ": unknown key ", unknown, " (", program, "'s settings: ", known,
                "; the plugins' options: --plugin help)");
}

}  // namespace colossal::apps
