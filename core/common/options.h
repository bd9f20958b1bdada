#pragma once
// One declaration per setting: a component or an application lists its settings once, in a
// visit() member, and everything else is derived from that list — reading a config file, the
// command-line flags (apps/common/cli_options.h), the help text with defaults, the range checks
// and the error for a key nothing declares:
//
//   struct Options {
//     int64_t bucket_bytes = 25 << 20;
//     int64_t batch_size = 8;
//     std::string mode = "pretrain";
//     template <class V> void visit(V& v) {
//       v.mib("bucket_mib", bucket_bytes, "gradient bucket size");
//       v("batch_size", batch_size, "samples per rank per micro-batch", at_least(1));
//       v("mode", mode, "what the data is", one_of({"pretrain", "sft"}));
//     }
//   };
//
//   read_options(opts, node);        // every listed key from a ConfigNode (typed errors name the key)
//   validate_options(opts);          // "--batch_size: expected >= 1, got 0"
//   auto info = list_options(opts);  // names, types, defaults, rules and help, for --help
//
// Values that come from flags may be JSON strings; read_options converts them by the field's type
// ("--bucket_mib 64" and "bucket_mib: 64" give the same result), with an error naming the key.
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "core/common/check.h"
#include "core/common/config.h"

namespace colossal {

/// What a setting accepts besides its type: a range for numbers (each element of a list), a set
/// of choices for text. Part of the declaration, so the flag's help, the config file and the
/// check say the same thing.
struct OptionRule {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  bool min_open = false, max_open = false;  // > min, < max instead of >=, <=
  std::vector<std::string> choices;         // text: one of these (empty: any)
  std::string alias;  // a second name for the flag and the key ("data" for "dataset"); "!no_x": a negating flag

  bool allows(double v) const {
    return (min_open ? v > min : v >= min) && (max_open ? v < max : v <= max);
  }
  /// ">= 1", "in (0, 1)", "<= 4096", "pretrain or sft"; empty when anything goes.
  std::string text() const {
    auto num = [](double v) {
      std::ostringstream s;
      if (v == static_cast<double>(static_cast<long long>(v))) s << static_cast<long long>(v);  // 100000000, not 1e+08
      else s << v;
      return s.str();
    };
    if (!choices.empty()) {
      std::string s;
      for (size_t i = 0; i < choices.size(); ++i)
        s += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
      return s;
    }
    const bool low = min > -std::numeric_limits<double>::infinity();
    const bool high = max < std::numeric_limits<double>::infinity();
    if (low && high) return "in " + std::string(min_open ? "(" : "[") + num(min) + ", " + num(max) + (max_open ? ")" : "]");
    if (low) return (min_open ? "> " : ">= ") + num(min);
    if (high) return (max_open ? "< " : "<= ") + num(max);
    return "";
  }
  OptionRule& also(std::string name) {
    alias = std::move(name);
    return *this;
  }
};

inline OptionRule at_least(double v) { return {.min = v}; }
inline OptionRule above(double v) { return {.min = v, .min_open = true}; }
inline OptionRule at_most(double v) { return {.max = v}; }
inline OptionRule between(double lo, double hi) { return {.min = lo, .max = hi}; }
/// (lo, hi): both ends excluded; [lo, hi): only the upper one.
inline OptionRule strictly_between(double lo, double hi) { return {.min = lo, .max = hi, .min_open = true, .max_open = true}; }
inline OptionRule from_up_to(double lo, double hi) { return {.min = lo, .max = hi, .max_open = true}; }
inline OptionRule one_of(std::vector<std::string> choices) { return {.choices = std::move(choices)}; }
inline OptionRule alias(std::string name) { return {.alias = std::move(name)}; }

struct OptionInfo {
  std::string name;
  std::string type;           // bool | int | float | string | list
  std::string default_value;  // as a user would write it
  std::string help;
  std::string rule;           // OptionRule::text(), "" when any value goes
  std::string alias;
};

namespace detail {

template <typename T>
struct is_vector : std::false_type {};
template <typename T>
struct is_vector<std::vector<T>> : std::true_type {};

template <typename T>
const char* option_type_name() {
  if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_integral_v<T>) return "int";
  else if constexpr (std::is_floating_point_v<T>) return "float";
  else if constexpr (is_vector<T>::value) return "list";
  else return "string";
}

/// A JSON value as the field's type: typed values pass through; text (from a flag) is parsed.
nlohmann::json option_value_for(const nlohmann::json& value, const char* type, const std::string& where);

template <typename T>
std::string option_text(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return v ? "true" : "false";
  else if constexpr (std::is_same_v<T, std::string>) return v.empty() ? "\"\"" : v;
  else if constexpr (is_vector<T>::value) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : " ") + option_text(e);
    return s.empty() ? "[]" : s;
  } else {
    std::ostringstream s;
    s << v;
    return s.str();
  }
}

class OptionReader {
 public:
  explicit OptionReader(const ConfigNode& node) : node_(node) {}
  template <typename T>
  void operator()(const char* name, T& field, const char*, const OptionRule& rule = {}) {
    // The alias is a second key too, unless it negates a flag ("!no_x", command line only).
    const bool keyed_alias = !rule.alias.empty() && rule.alias[0] != '!';
    const std::string key = node_.has(name) || !keyed_alias ? name : rule.alias;
    if (!node_.has(key)) return;
    if constexpr (std::is_same_v<T, std::vector<std::string>>) {
      if (node_.raw(key).is_string()) {  // one file where a list is expected
        std::string one;
        node_.read(key, one);
        field = {one};
        return;
      }
    }
    if constexpr (is_vector<T>::value) {
      node_.read(key, field);
    } else {
      auto typed = option_value_for(node_.raw(key), option_type_name<T>(), node_.describe(key));
      node_.read_value(key, typed, field);
    }
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
  void operator()(const char* name, T& field, const char* help, const OptionRule& rule = {}) {
    out.push_back({name, option_type_name<T>(), option_text(field), help, rule.text(), rule.alias});
  }
  void mib(const char* name, int64_t& bytes, const char* help) {
    out.push_back({name, "float", option_text(static_cast<double>(bytes) / (1 << 20)), std::string(help) + " (MiB)",
                   "> 0", ""});
  }
  std::vector<OptionInfo> out;
};

/// Checks every value against its rule; the message names the setting as `prefix` + name.
class OptionValidator {
 public:
  explicit OptionValidator(std::string prefix) : prefix_(std::move(prefix)) {}
  template <typename T>
  void operator()(const char* name, T& field, const char*, const OptionRule& rule = {}) {
    if constexpr (std::is_same_v<T, std::string>) {
      if (rule.choices.empty()) return;
      for (const auto& c : rule.choices)
        if (c == field) return;
      COLOSSAL_FAIL(prefix_, name, ": expected ", rule.text(), ", got '", field, "'");
    } else if constexpr (is_vector<T>::value) {
      for (const auto& e : field) (*this)(name, const_cast<typename T::value_type&>(e), "", rule);
    } else if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
      COLOSSAL_CHECK(rule.allows(static_cast<double>(field)), prefix_, name, ": expected ", rule.text(), ", got ",
                     option_text(field));
    }
  }
  void mib(const char*, int64_t&, const char*) {}

 private:
  std::string prefix_;
};

}  // namespace detail

/// Sets every listed option present in `node` (marking it used); the rest keep their values.
template <typename Options>
void read_options(Options& options, const ConfigNode& node) {
  detail::OptionReader reader(node);
  options.visit(reader);
}

/// Every value within its declared rule; throws "PREFIXname: expected RULE, got VALUE".
template <typename Options>
void validate_options(Options options, const std::string& prefix = "--") {
  detail::OptionValidator validator(prefix);
  options.visit(validator);
}

/// The options' names, types, current values (the defaults, on a default-constructed struct) and help.
template <typename Options>
std::vector<OptionInfo> list_options(Options options) {
  detail::OptionLister lister;
  options.visit(lister);
  return lister.out;
}

}  // namespace colossal
