#pragma once
// A model's vocabulary: token -> id and back.
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/json_field.h"

namespace colossal::text {

class Vocab {
 public:
  /// {"token": id, ...}; ids may have gaps.
  static Vocab from_map(const JsonField& j);
  void add(const std::string& token, int32_t id);
  std::optional<int32_t> id(const std::string& token) const {
    auto it = ids_.find(token);
    if (it == ids_.end()) return std::nullopt;
    return it->second;
  }
  std::optional<std::string> token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !present_[static_cast<size_t>(id)]) return std::nullopt;
    return tokens_[static_cast<size_t>(id)];
  }
  int64_t size() const { return static_cast<int64_t>(ids_.size()); }

 private:
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
};

}  // namespace colossal::text
