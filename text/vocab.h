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
  /// Looks up "<0x00>".."<0xFF>" once (after the last add; from_map does it).
  void index_byte_tokens();
  /// Byte fallback: the ids of "<0x00>".."<0xFF>" appended for every byte of `s`, when the
  /// vocabulary holds all of them (false, nothing appended, otherwise).
  bool append_byte_tokens(const std::string& s, std::vector<int32_t>& out) const;

 private:
  std::unordered_map<std::string, int32_t> ids_;
  std::vector<std::string> tokens_;
  std::vector<bool> present_;
  std::vector<int32_t> byte_ids_ = std::vector<int32_t>(256, -1);  // "<0xXX>" ids by byte (-1: absent)
};

}  // namespace colossal::text
