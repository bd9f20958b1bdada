#include "text/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/common/check.h"

namespace colossal::text {

namespace {
// Oniguruma's classes in PCRE2 syntax: inside a bracket expression the bare class, outside it a
// bracket of its own.
constexpr const char* kSpace = "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}";
constexpr const char* kWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
}  // namespace

std::string oniguruma_classes(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      const char* body = n == 's' || n == 'S' ? kSpace : n == 'w' || n == 'W' ? kWord : n == 'd' || n == 'D' ? "\\p{Nd}" : nullptr;
      if (body && !in_class) {
        out += (n == 'S' || n == 'W' || n == 'D') ? "[^" : "[";
        out += body;
        out += "]";
      } else if (body && (n == 's' || n == 'w' || n == 'd')) {
        out += body;
      } else {
        // A negated class inside brackets has no plain spelling; PCRE2's own meaning is kept.
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // "[]...]" and "[^]...]": a leading ] is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

std::string replace_matches(const Regex& pattern, const std::string& text, const std::string& content) {
  std::string out;
  size_t prev = 0;
  for (auto [b, e] : pattern.find_all(text)) {
    out.append(text, prev, b - prev);
    out += content;
    prev = e;
  }
  out.append(text, prev, std::string::npos);
  return out;
}

std::string replace_literal(const std::string& text, const std::string& from, const std::string& to, int64_t count) {
  if (from.empty()) return text;
  std::string out;
  size_t prev = 0;
  for (size_t k = text.find(from); k != std::string::npos && count != 0; k = text.find(from, prev), --count) {
    out.append(text, prev, k - prev);
    out += to;
    prev = k + from.size();
  }
  out.append(text, prev, std::string::npos);
  return out;
}

std::string quote_regex(std::string_view literal) {
  std::string out;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos) out += '\\';
    out += c;
  }
  return out;
}

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()), pattern_(pattern) {
  const std::string rewritten = oniguruma_classes(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    COLOSSAL_FAIL("[text] ", where.empty() ? "" : where + ": ", "regular expression '", pattern, "' rejected at offset ",
                  offset, " (of the pattern as compiled: '", rewritten, "'): ", reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // a plain interpreter where JIT is missing
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  COLOSSAL_CHECK(md != nullptr, "[text] out of memory matching '", pattern_, "'");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  // Invalid UTF-8 is checked once (the first call); later calls start inside valid text.
  uint32_t options = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), start, options, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      COLOSSAL_FAIL("[text] matching '", pattern_, "': ", reinterpret_cast<const char*>(message));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {  // an empty match: step over one character
      if (e >= text.size()) break;
      size_t next = e + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace colossal::text
