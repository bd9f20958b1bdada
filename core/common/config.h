#pragma once
// Options from JSON or YAML files, with errors that name the file, the key and the expected
// type. The pattern for every configurable component:
//
//   struct Options {
//     int64_t bucket_bytes = 25 << 20;   // defaults on every member
//     void validate() const;             // throws with "expected X, got Y"
//     void read(const ConfigNode& c) {   // optional: fill from a config file
//       c.read("bucket_bytes", bucket_bytes);
//     }
//   };
//
//   auto cfg = ConfigNode::load_file("train.yaml");
//   opts.read(cfg.child("ddp"));
//   cfg.check_all_keys_used();            // a misspelt key is an error, not silently ignored
#include <nlohmann/json.hpp>

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace colossal {

class ConfigNode {
 public:
  /// Reads a .json, .yaml or .yml file; parse errors name the file (and line for YAML).
  static ConfigNode load_file(const std::string& path);
  /// Wraps an already-parsed document; `origin` names it in messages.
  static ConfigNode from_json(nlohmann::json doc, std::string origin);
  /// Parses text in the given format ("json" or "yaml").
  static ConfigNode parse(const std::string& text, const std::string& format, std::string origin);

  bool has(const std::string& key) const;
  /// A nested mapping; an absent key gives an empty node. A non-mapping value throws.
  ConfigNode child(const std::string& key) const;

  /// Sets `field` from `key` when present; leaves the default otherwise. Throws when the value
  /// has the wrong type or does not fit (e.g. 3.5 for an integer, -1 for an unsigned).
  template <typename T>
  void read(const std::string& key, T& field) const {
    if (!has(key)) return;
    mark_used(key);
    field = convert<T>(json_->at(key), key);
  }

  /// The value of `key` as parsed (throws when absent).
  const nlohmann::json& raw(const std::string& key) const;
  /// Like read(), but converts `value` (e.g. `key`'s raw value after a conversion) into field.
  template <typename T>
  void read_value(const std::string& key, const nlohmann::json& value, T& field) const {
    mark_used(key);
    field = convert<T>(value, key);
  }
  /// This node's keys, and those no read() has consumed yet (this level only).
  std::vector<std::string> keys() const;
  std::vector<std::string> unused_keys() const;
  /// The file or text this node came from ("file 'train.yaml'").
  const std::string& origin() const { return origin_; }

  /// Throws listing every key of this node and its visited children that no read() consumed.
  void check_all_keys_used() const;

  /// "file 'train.yaml', key 'ddp.bucket_bytes'"
  std::string describe(const std::string& key) const;

 private:
  struct Usage {
    std::set<std::string> used;  // full dotted paths
  };
  ConfigNode(std::shared_ptr<const nlohmann::json> doc, const nlohmann::json* node,
             std::string origin, std::string path, std::shared_ptr<Usage> usage);

  void mark_used(const std::string& key) const;
  std::string full_key(const std::string& key) const;
  [[noreturn]] void type_error(const std::string& key, const char* expected,
                               const nlohmann::json& found) const;

  template <typename T>
  T convert(const nlohmann::json& v, const std::string& key) const;

  std::shared_ptr<const nlohmann::json> doc_;  // keeps the document alive
  const nlohmann::json* json_;                 // this node (an object, or null when absent)
  std::string origin_;
  std::string path_;  // dotted path of this node from the root ("" for the root)
  std::shared_ptr<Usage> usage_;
};

template <>
bool ConfigNode::convert<bool>(const nlohmann::json& v, const std::string& key) const;
template <>
int ConfigNode::convert<int>(const nlohmann::json& v, const std::string& key) const;
template <>
int64_t ConfigNode::convert<int64_t>(const nlohmann::json& v, const std::string& key) const;
template <>
uint64_t ConfigNode::convert<uint64_t>(const nlohmann::json& v, const std::string& key) const;
template <>
double ConfigNode::convert<double>(const nlohmann::json& v, const std::string& key) const;
template <>
std::string ConfigNode::convert<std::string>(const nlohmann::json& v,
                                             const std::string& key) const;
template <>
std::vector<int64_t> ConfigNode::convert<std::vector<int64_t>>(const nlohmann::json& v,
                                                               const std::string& key) const;
template <>
std::vector<std::string> ConfigNode::convert<std::vector<std::string>>(
    const nlohmann::json& v, const std::string& key) const;

}  // namespace colossal
