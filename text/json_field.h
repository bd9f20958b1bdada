#pragma once
// Reading a tokenizer file's JSON with errors that say where: the file, the JSON path
// ("$.model.merges[3]") and what was expected against what was found.
#include <nlohmann/json.hpp>

#include <string>

namespace colossal::text {

class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string file, std::string path = "$")
      : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& path() const { return path_; }
  const std::string& file() const { return file_; }
  std::string where() const { return file_ + ": " + path_; }

  bool has(const std::string& key) const { return value_->is_object() && value_->contains(key) && !(*value_)[key].is_null(); }
  /// A member that must be there.
  JsonField operator[](const std::string& key) const;
  JsonField operator[](size_t i) const;
  size_t size() const;

  std::string str() const;
  int64_t integer() const;
  double number() const;
  bool boolean() const;
  /// Optional members: the default when absent or null.
  std::string str(const std::string& key, const std::string& fallback) const;
  int64_t integer(const std::string& key, int64_t fallback) const;
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  /// The "type" member of a component, checked to be one of `known` (listed in the error).
  std::string type(const std::string& what, std::initializer_list<const char*> known) const;
  [[noreturn]] void fail(const std::string& expected) const;

 private:
  const nlohmann::json* value_;
  std::string file_, path_;
};

}  // namespace colossal::text
