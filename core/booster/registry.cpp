// The plugin registry: one explicit line per plugin (no static self-registration, which the
// linker may drop from a static library).
#include "core/booster/booster.h"
#include "core/booster/ddp_plugin.h"
#include "core/common/check.h"

namespace colossal::booster {
namespace {

struct Entry {
  const char* name;
  std::shared_ptr<Plugin> (*make)();
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"ddp", [] { return std::shared_ptr<Plugin>(std::make_shared<DDPPlugin>()); }},
  };
  return entries;
}

}  // namespace

std::vector<std::string> plugin_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.push_back(e.name);
  return names;
}

std::shared_ptr<Plugin> make_plugin(const std::string& name) {
  std::string known;
  for (const auto& e : registry()) {
    if (name == e.name) return e.make();
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  COLOSSAL_FAIL("[booster] unknown plugin '", name, "' (known: ", known, ")");
}

}  // namespace colossal::booster
