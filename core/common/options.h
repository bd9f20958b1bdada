#pragma once
// One list of a component's settable options, used three ways: read from a config file (or
// from command-line flags, which arrive as text), printed with defaults by `--plugin help`, and
// checked for unknown names. An Options struct lists its fields once:
//
//   struct Options {
//     int64_t bucket_bytes = 25 << 20;
//     bool find_unused_parameters = false;
//     template <class V> void visit(V& v) {
//       v.mib("bucket_mib", bucket_bytes, "gradient bucket size");
//       v("find_unused_parameters", find_unused_parameters, "allow parameters without a gradient");
//     }
//   };
//
//   read_options(opts, node);        // every listed key from a ConfigNode (typed errors name the key)
//   auto info = list_options(opts);  // names, types, defaults and help, for --help
//
// Values that come from flags are JSON strings; read_options converts them by the field's type
// ("--bucket_mib 64" and "bucket_mib: 64" give the same result), with an error naming the key.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "core/common/check.h"
#include "core/common/config.h"

namespace colossal {

struct OptionInfo {
  std::string name;
  std::string type;           // bool | int | float | string
  std::string default_value;  // as a user would write it
  std::string help;
};

namespace detail {

template <typename T>
const char* option_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else return "string";
}

/// A JSON value as the field's type: typed values pass through; text (from a flag) is parsed.
nlohmann::json option_value_for(const nlohmann::json& value, const char* type, const std::string& where);

template <typename T>
std::string option_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, std::string>) return v.empty() ? "\"\"" : v;
  else {
    std::ostringstream s;
    s << v;
    return s.str();
  }
}

class OptionReader {
 public:
  explicit OptionReader(const ConfigNode& node) : node_(node) {}
  template <typename T>
  void operator()(const char* name, T& field, const char*) {
    if (!node_.has(name)) return;
    auto typed = option_value_for(node_.raw(name), option_type_name<T>(), node_.describe(name));
    node_.read_value(name, typed, field);
  }
  /// A byte count set in MiB (fractions allowed).
  void mib(const char* name, int64_t& bytes, const char*) {
    if (!node_.has(name)) return;
    auto typed = option_value_for(node_.raw(name), "float", node_.describe(name));
    double mib = 0;
    node_.read_value(name, typed, mib);
    COLOSSAL_CHECK(mib > 0, node_.describe(name), ": expected a size in MiB > 0, got ", mib);
    bytes = static_cast<int64_t>(mib * (1 << 20));
  }

 private:
  const ConfigNode& node_;
};

class OptionLister {
 public:
  template <typename T>
  void operator()(const char* name, T& field, const char* help) {
    out.push_back({name, option_type_name<T>(), option_text(field), help});
  }
  void mib(const char* name, int64_t& bytes, const char* help) {
    out.push_back({name, "float", option_text(static_cast<double>(bytes) / (1 << 20)), std::string(help) + " (MiB)"});
  }
  std::vector<OptionInfo> out;
};

}  // namespace detail

/// Sets every listed option present in `node` (marking it used); the rest keep their values.
template <typename Options>
void read_options(Options& options, const ConfigNode& node) {
  detail::OptionReader reader(node);
  options.visit(reader);
}

/// The options' names, types, current values (the defaults, on a default-constructed struct) and help.
template <typename Options>
std::vector<OptionInfo> list_options(Options options) {
  detail::OptionLister lister;
  options.visit(lister);
  return lister.out;
}

}  // namespace colossal
