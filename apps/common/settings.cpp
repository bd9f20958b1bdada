#include "apps/common/settings.h"

#include <set>

#include "core/common/check.h"

namespace colossal::apps {

void reject_unknown_keys(const ConfigNode& node, const std::vector<std::string>& declared, const std::string& program) {
  // What the plugin configuration takes: its general keys and any plugin's own options.
  const auto keys = plugin_keys();
  const std::set<std::string> taken(keys.begin(), keys.end());
  std::string unknown;
  for (const auto& key : node.unused_keys())
    if (!taken.count(key)) unknown += (unknown.empty() ? "'" : ", '") + key + "'";
  if (unknown.empty()) return;
  std::string known;
  for (const auto& k : declared) known += (known.empty() ? "" : ", ") + k;
  COLOSSAL_FAIL("[config] ", node.origin(), ": unknown key ", unknown, " (", program, "'s settings: ", known,
                "; the plugins' options: --plugin help)");
}

}  // namespace colossal::apps
