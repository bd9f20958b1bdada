// Splitting on delimiters, and GPT-2's byte <-> character map.
#include <algorithm>
#include <map>

#include "core/common/check.h"
#include "text/components.h"
#include "text/unicode.h"

namespace colossal::text {

SplitBehavior parse_split_behavior(const JsonField& j) {
  const std::string b = j.str();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  j.fail("Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
}

std::vector<std::pair<size_t, size_t>> split_by(size_t length, const std::vector<std::pair<size_t, size_t>>& matches,
                                                SplitBehavior behavior, bool invert) {
  // The whole text as alternating (span, is_delimiter), as Hugging Face's Pattern::find_matches.
  struct Span {
    size_t b, e;
    bool delim;
  };
  std::vector<Span> spans;
  size_t prev = 0;
  for (auto [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != length) spans.push_back({prev, length, invert});
  if (spans.empty()) spans.push_back({0, 0, false});

  std::vector<std::pair<size_t, size_t>> out;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const auto& s : spans)
        if (!s.delim) out.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::kIsolated:
      for (const auto& s : spans) out.emplace_back(s.b, s.e);
      break;
    case SplitBehavior::kContiguous: {
      bool previous = false;
      for (const auto& s : spans) {
        if (s.delim == previous && !out.empty()) out.back().second = s.e;
        else out.emplace_back(s.b, s.e);
        previous = s.delim;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool previous = false;
      for (const auto& s : spans) {
        if (s.delim && !previous && !out.empty()) out.back().second = s.e;
        else out.emplace_back(s.b, s.e);
        previous = s.delim;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool previous = false;
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->delim && !previous && !out.empty()) out.back().first = it->b;
        else out.emplace_back(it->b, it->e);
        previous = it->delim;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  return out;
}

const std::vector<std::string>& byte_to_unicode() {
  static const std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(t[b], c);
    }
    return t;
  }();
  return table;
}

int unicode_to_byte(char32_t c) {
  // The byte-level characters all lie below U+0144: a table indexed by code point.
  static const std::vector<int> back = [] {
    std::vector<int> v(0x144, -1);
    const auto& t = byte_to_unicode();
    for (int b = 0; b < 256; ++b) v[decode_utf8(t[b], 0).first] = b;
    return v;
  }();
  return c < back.size() ? back[c] : -1;
}

}  // namespace colossal::text
