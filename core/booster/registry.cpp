// The plugin registry: one explicit line per plugin (no static self-registration, which the
// linker may drop from a static library).
#include "core/booster/booster.h"
#include "core/booster/ddp_plugin.h"
#include "core/common/check.h"
#include "core/zero/gemini_plugin.h"
#include "core/zero/low_level_zero_plugin.h"

namespace colossal::booster {
namespace {

struct Entry {
  const char* name;
  std::shared_ptr<Plugin> (*make)();
};

std::shared_ptr<Plugin> zero1() {
  zero::LowLevelZeroPlugin::Options o;
  o.stage = 1;
  return std::make_shared<zero::LowLevelZeroPlugin>(o);
}

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"ddp", [] { return std::shared_ptr<Plugin>(std::make_shared<DDPPlugin>()); }},
      {"zero1", [] { return zero1(); }},
      {"zero2", [] { return std::shared_ptr<Plugin>(std::make_shared<zero::LowLevelZeroPlugin>()); }},
      {"gemini", [] { return std::shared_ptr<Plugin>(std::make_shared<zero::GeminiPlugin>()); }},
      {"zero3", [] { return std::shared_ptr<Plugin>(std::make_shared<zero::GeminiPlugin>()); }},
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
