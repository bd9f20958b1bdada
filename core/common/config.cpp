#include "core/common/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/common/check.h"

namespace colossal {
namespace {

const char* json_type_name(const nlohmann::json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number_float()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "a list";
  return "a mapping";
}

// YAML scalars carry no type in yaml-cpp; a plain (unquoted) scalar is typed by its text the way
// YAML 1.2's core schema does, a quoted one stays a string.
nlohmann::json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Sequence: {
      nlohmann::json arr = nlohmann::json::array();
      for (const auto& item : node) arr.push_back(yaml_to_json(item));
      return arr;
    }
    case YAML::NodeType::Map: {
      nlohmann::json obj = nlohmann::json::object();
      for (const auto& kv : node) obj[kv.first.as<std::string>()] = yaml_to_json(kv.second);
      return obj;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (s == "null" || s == "~" || s.empty()) return nullptr;
      try {
        size_t pos = 0;
        long long i = std::stoll(s, &pos, 0);
        if (pos == s.size()) return i;
      } catch (...) {
      }
      try {
        size_t pos = 0;
        double d = std::stod(s, &pos);
        if (pos == s.size()) return d;
      } catch (...) {
      }
      return s;
    }
  }
  return nullptr;
}

std::string extension_of(const std::string& path) {
  auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(dot + 1);
}

}  // namespace

ConfigNode::ConfigNode(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node,
                       std::string origin, std::string path, std::shared_ptr<Usage> usage)
    : doc_(std::move(doc)),
      json_(node),
      origin_(std::move(origin)),
      path_(std::move(path)),
      usage_(std::move(usage)) {}

ConfigNode ConfigNode::from_json(nlohmann::json doc, std::string origin) {
  COLOSSAL_CHECK(doc.is_object() || doc.is_null(), "[config] ", origin,
                 ": expected a mapping at the top level, found ", json_type_name(doc));
  auto shared = std::make_shared<const nlohmann::json>(std::move(doc));
  const nlohmann::json* root = shared->is_null() ? nullptr : shared.get();
  return ConfigNode(shared, root, std::move(origin), "", std::make_shared<Usage>());
}

ConfigNode ConfigNode::parse(const std::string& text, const std::string& format,
                             std::string origin) {
  if (format == "json") {
    try {
      return from_json(nlohmann::json::parse(text), origin);
    } catch (const nlohmann::json::parse_error& e) {
      COLOSSAL_FAIL("[config] ", origin, ": invalid JSON: ", e.what());
    }
  }
  if (format == "yaml") {
    try {
      return from_json(yaml_to_json(YAML::Load(text)), origin);
    } catch (const YAML::Exception& e) {
      COLOSSAL_FAIL("[config] ", origin, ": invalid YAML at line ", e.mark.line + 1, ", column ",
                    e.mark.column + 1, ": ", e.msg);
    }
  }
  COLOSSAL_FAIL("[config] ", origin, ": unknown format '", format, "' (expected json or yaml)");
}

ConfigNode ConfigNode::load_file(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[config] cannot open config file '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string ext = extension_of(path);
  std::string format = (ext == "yaml" || ext == "yml") ? "yaml" : ext == "json" ? "json" : "";
  COLOSSAL_CHECK(!format.empty(), "[config] config file '", path,
                 "': expected a .json, .yaml or .yml extension");
  return parse(ss.str(), format, "file '" + path + "'");
}

bool ConfigNode::has(const std::string& key) const {
  return json_ != nullptr && json_->contains(key) && !json_->at(key).is_null();
}

ConfigNode ConfigNode::child(const std::string& key) const {
  std::string path = full_key(key);
  if (!has(key)) return ConfigNode(doc_, nullptr, origin_, path, usage_);
  const nlohmann::json& v = json_->at(key);
  if (!v.is_object()) type_error(key, "a mapping", v);
  mark_used(key);
  return ConfigNode(doc_, &v, origin_, path, usage_);
}

void ConfigNode::mark_used(const std::string& key) const { usage_->used.insert(full_key(key)); }

std::string ConfigNode::full_key(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

std::string ConfigNode::describe(const std::string& key) const {
  return origin_ + ", key '" + full_key(key) + "'";
}

void ConfigNode::type_error(const std::string& key, const char* expected,
                            const nlohmann::json& found) const {
  COLOSSAL_FAIL("[config] ", describe(key), ": expected ", expected, ", found ",
                json_type_name(found), " (", found.dump(), ")");
}

const nlohmann::json& ConfigNode::raw(const std::string& key) const {
  COLOSSAL_CHECK(has(key), "[config] ", describe(key), ": missing");
  return json_->at(key);
}

std::vector<std::string> ConfigNode::keys() const {
  std::vector<std::string> out;
  if (json_ == nullptr) return out;
  for (auto it = json_->begin(); it != json_->end(); ++it) out.push_back(it.key());
  return out;
}

std::vector<std::string> ConfigNode::unused_keys() const {
  std::vector<std::string> out;
  for (const auto& k : keys())
    if (!usage_->used.count(full_key(k))) out.push_back(k);
  return out;
}

void ConfigNode::check_all_keys_used() const {
  if (json_ == nullptr) return;
  std::vector<std::string> unknown;
  // Walk this node; a key is fine if it was read, or if it is a mapping whose keys were read.
  std::vector<std::pair<const nlohmann::json*, std::string>> stack{{json_, path_}};
  while (!stack.empty()) {
    auto [node, prefix] = stack.back();
    stack.pop_back();
    for (auto it = node->begin(); it != node->end(); ++it) {
      std::string key = prefix.empty() ? it.key() : prefix + "." + it.key();
      if (!usage_->used.count(key)) {
        unknown.push_back(key);
      } else if (it.value().is_object()) {
        stack.emplace_back(&it.value(), key);
      }
    }
  }
  if (unknown.empty()) return;
  std::string list;
  for (const auto& k : unknown) list += (list.empty() ? "'" : ", '") + k + "'";
  COLOSSAL_FAIL("[config] ", origin_, ": unknown key", unknown.size() > 1 ? "s " : " ", list);
}

template <>
bool ConfigNode::convert<bool>(const nlohmann::json& v, const std::string& key) const {
  if (!v.is_boolean()) type_error(key, "a boolean", v);
  return v.get<bool>();
}

template <>
int64_t ConfigNode::convert<int64_t>(const nlohmann::json& v, const std::string& key) const {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      type_error(key, "an integer that fits in 64 bits", v);
    return static_cast<int64_t>(u);
  }
  type_error(key, "an integer", v);
}

template <>
uint64_t ConfigNode::convert<uint64_t>(const nlohmann::json& v, const std::string& key) const {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());  // from YAML
  type_error(key, "a non-negative integer", v);
}

template <>
int ConfigNode::convert<int>(const nlohmann::json& v, const std::string& key) const {
  int64_t x = convert<int64_t>(v, key);
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max())
    type_error(key, "an integer that fits in 32 bits", v);
  return static_cast<int>(x);
}

template <>
double ConfigNode::convert<double>(const nlohmann::json& v, const std::string& key) const {
  if (!v.is_number()) type_error(key, "a number", v);
  return v.get<double>();
}

template <>
std::string ConfigNode::convert<std::string>(const nlohmann::json& v,
                                             const std::string& key) const {
  if (!v.is_string()) type_error(key, "a string", v);
  return v.get<std::string>();
}

template <>
std::vector<int64_t> ConfigNode::convert<std::vector<int64_t>>(const nlohmann::json& v,
                                                               const std::string& key) const {
  if (!v.is_array()) type_error(key, "a list of integers", v);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(convert<int64_t>(v[i], key + "[" + std::to_string(i) + "]"));
  }
  return out;
}

template <>
std::vector<std::string> ConfigNode::convert<std::vector<std::string>>(
    const nlohmann::json& v, const std::string& key) const {
  if (!v.is_array()) type_error(key, "a list of strings", v);
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(convert<std::string>(v[i], key + "[" + std::to_string(i) + "]"));
  }
  return out;
}

namespace detail {

nlohmann::json option_value_for(const nlohmann::json& value, const char* type, const std::string& where) {
  if (!value.is_string()) return value;  // typed already (a config file); convert() checks it
  const std::string t = type;
  if (t == "string") return value;
  const std::string text = value.get<std::string>();
  if (t == "bool") {
    if (text == "true" || text == "1" || text == "on" || text == "yes") return true;
    if (text == "false" || text == "0" || text == "off" || text == "no") return false;
    COLOSSAL_FAIL("[config] ", where, ": expected true or false, got '", text, "'");
  }
  size_t pos = 0;
  try {
    if (t == "int") {
      long long i = std::stoll(text, &pos, 10);
      if (pos == text.size()) return i;
    } else {
      double d = std::stod(text, &pos);
      if (pos == text.size()) return d;
    }
  } catch (const std::exception&) {
  }
  COLOSSAL_FAIL("[config] ", where, ": expected ", t == "int" ? "an integer" : "a number", ", got '", text, "'");
}

}  // namespace detail
}  // namespace colossal
