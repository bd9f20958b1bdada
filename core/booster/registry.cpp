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
  std::shared_ptr<Plugin> (*make)(const std::string& precision);
};

std::shared_ptr<Plugin> ddp(const std::string& precision) {
  DDPPlugin::Options o;
  o.precision = precision;
  return std::make_shared<DDPPlugin>(o);
}

template <int Stage>
std::shared_ptr<Plugin> low_level_zero(const std::string& precision) {
  zero::LowLevelZeroPlugin::Options o;
  o.stage = Stage;
  o.precision = precision;
  return std::make_shared<zero::LowLevelZeroPlugin>(o);
}

std::shared_ptr<Plugin> gemini(const std::string& precision) {
  zero::GeminiPlugin::Options o;
  o.precision = precision;
  return std::make_shared<zero::GeminiPlugin>(o);
}

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"ddp", ddp},
      {"zero1", low_level_zero<1>},
      {"zero2", low_level_zero<2>},
      {"gemini", gemini},
      {"zero3", gemini},
  };
  return entries;
}

}  // namespace

std::vector<std::string> plugin_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.push_back(e.name);
  return names;
}

std::shared_ptr<Plugin> make_plugin(const std::string& name, const std::string& precision) {
  std::string known;
  for (const auto& e : registry()) {
    if (name == e.name) return e.make(precision);
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  COLOSSAL_FAIL("[booster] unknown plugin '", name, "' (known: ", known, ")");
}

}  // namespace colossal::booster
