#pragma once
// Declared settings (core/common/options.h) as CLI11 flags: a visitor that adds each setting of a
// visit() list to a CLI::App as --NAME (and --ALIAS), with its help, default and accepted values.
//   CliBinder binder(app);
//   settings.visit(binder);
#include <CLI/CLI.hpp>

#include <string>
#include <type_traits>

#include "core/common/options.h"

namespace colossal::apps {

/// A visitor that adds each declared setting to a CLI11 app as --NAME (and --ALIAS).
class CliBinder {
 public:
  explicit CliBinder(CLI::App& app) : app_(app) {}
  template <typename T>
  void operator()(const char* name, T& field, const char* help, const OptionRule& rule = {}) {
    std::string names = std::string("--") + name;
    // An alias "!no_x" is a negating flag (--no_x sets false).
    if (!rule.alias.empty()) names += rule.alias[0] == '!' ? ",!--" + rule.alias.substr(1) : ",--" + rule.alias;
    std::string text = help;
    if (const auto r = rule.text(); !r.empty()) text += " [" + r + "]";
    if constexpr (std::is_same_v<T, bool>) {
      // --NAME alone is true; --NAME=false (what the Python functions write) is false.
      app_.add_flag(names, field, text)->capture_default_str();
    } else {
      app_.add_option(names, field, text)->capture_default_str();
    }
  }
  void mib(const char* name, int64_t& bytes, const char* help) {
    app_.add_option_function<double>(std::string("--") + name,
                                     [&bytes](double mib) { bytes = static_cast<int64_t>(mib * (1 << 20)); },
                                     std::string(help) + " (MiB)");
  }

 private:
  CLI::App& app_;
};

}  // namespace colossal::apps
