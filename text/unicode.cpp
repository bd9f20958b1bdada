#include "text/unicode.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/common/check.h"

namespace colossal::text {

std::pair<char32_t, int> decode_utf8(std::string_view s, size_t i) {
  utf8proc_int32_t c = 0;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                  static_cast<utf8proc_ssize_t>(s.size() - i), &c);
  if (n <= 0) return {0xFFFD, 1};
  return {static_cast<char32_t>(c), static_cast<int>(n)};
}

void append_utf8(std::string& out, char32_t c) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(c), buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

std::vector<char32_t> code_points(std::string_view s) {
  std::vector<char32_t> out;
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    out.push_back(c);
    i += n;
  }
  return out;
}

std::vector<int> char_lengths(std::string_view s) {
  std::vector<int> out;
  for (size_t i = 0; i < s.size();) {
    const int n = decode_utf8(s, i).second;
    out.push_back(n);
    i += n;
  }
  return out;
}

std::vector<size_t> grapheme_lengths(std::string_view s) {
  std::vector<size_t> out;
  utf8proc_int32_t state = 0;
  char32_t prev = 0;
  size_t start = 0;
  for (size_t i = 0; i < s.size();) {
    const auto [c, n] = decode_utf8(s, i);
    if (i > 0 && utf8proc_grapheme_break_stateful(static_cast<utf8proc_int32_t>(prev),
                                                  static_cast<utf8proc_int32_t>(c), &state)) {
      out.push_back(i - start);
      start = i;
    }
    prev = c;
    i += static_cast<size_t>(n);
  }
  if (start < s.size()) out.push_back(s.size() - start);
  return out;
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n <= 0) return false;
    i += static_cast<size_t>(n);
  }
  return true;
}

std::string normalize(std::string_view s, NormalForm form) {
  if (s.empty()) return {};
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNFC: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNFD: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                              static_cast<utf8proc_ssize_t>(s.size()), &out, static_cast<utf8proc_option_t>(options));
  COLOSSAL_CHECK(n >= 0, "[text] Unicode normalisation failed: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

std::string lowercase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    if (c < 0x80) {
      out.push_back(static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c));
    } else if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
      out += "i\xCC\x87";
    } else {
      append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
    i += n;
  }
  return out;
}

namespace {
utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }
}  // namespace

bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_control(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\r') return false;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CN:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CS:
      return true;
    default:
      return false;
  }
}

bool is_punctuation(char32_t c) {
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

bool is_bert_punctuation(char32_t c) {
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  return is_punctuation(c);
}

bool is_chinese_char(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

bool is_combining_mark(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_numeric(char32_t c) {
  const auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t c) {
  const auto k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) || is_numeric(c);
}

}  // namespace colossal::text

namespace colossal::text {

namespace {
// How many bytes one U+FFFD replaces at i: the longest prefix of a valid sequence (at least 1),
// as Rust's String::from_utf8_lossy counts.
size_t invalid_length(std::string_view s, size_t i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const size_t need = c >= 0xF0 && c <= 0xF4 ? 4 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xC2 && c <= 0xDF ? 2 : 1;
  size_t n = 1;
  while (n < need && i + n < s.size()) {
    const unsigned char d = static_cast<unsigned char>(s[i + n]);
    unsigned char lo = 0x80, hi = 0xBF;
    if (n == 1) {
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    if (d < lo || d > hi) break;
    ++n;
  }
  return n;
}
}  // namespace

std::string to_valid_utf8(std::string_view s) {
  if (valid_utf8(s)) return std::string(s);
  std::string out;
  for (size_t i = 0; i < s.size();) {
    utf8proc_int32_t c = 0;
    const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                    static_cast<utf8proc_ssize_t>(s.size() - i), &c);
    if (n > 0) {
      out.append(s.substr(i, static_cast<size_t>(n)));
      i += static_cast<size_t>(n);
    } else {
      out += "\xEF\xBF\xBD";
      i += invalid_length(s, i);
    }
  }
  return out;
}

}  // namespace colossal::text
