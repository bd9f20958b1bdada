#pragma once
// A compiled Unicode regular expression (PCRE2, UTF and Unicode properties on) with the meaning
// Hugging Face tokenizers gives its patterns (Oniguruma's): \s is the White_Space property (NEL
// included), \w letters, marks, decimal digits and connector punctuation, \d decimal digits.
// A pattern PCRE2 rejects is an error naming the pattern, the offset and PCRE2's reason.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace colossal::text {

class Regex {
 public:
  /// `where` names the pattern's origin in errors (a file and JSON path).
  explicit Regex(const std::string& pattern, const std::string& where = "");
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  /// Every non-overlapping match, left to right, as [begin, end) byte offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string pattern_;
};

/// `text` with every match of `pattern` replaced by `content`.
std::string replace_matches(const Regex& pattern, const std::string& text, const std::string& content);
/// `text` with the first `count` occurrences (all when < 0) of `from` replaced by `to`.
std::string replace_literal(const std::string& text, const std::string& from, const std::string& to, int64_t count = -1);

/// A literal string as a pattern (every metacharacter quoted).
std::string quote_regex(std::string_view literal);
/// The pattern rewritten to Oniguruma's class meanings (what Regex compiles); exposed for tests.
std::string oniguruma_classes(const std::string& pattern);

}  // namespace colossal::text
