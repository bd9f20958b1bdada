// Normalizers: Unicode forms, case, accents, replacements, BERT's cleaning, sequences.
#include "core/common/check.h"
#include "text/components.h"
#include "text/regex.h"
#include "text/unicode.h"

namespace colossal::text {
namespace {

class FormNormalizer : public Normalizer {
 public:
  explicit FormNormalizer(NormalForm f) : form_(f) {}
  std::string normalize(std::string s) const override { return text::normalize(s, form_); }

 private:
  NormalForm form_;
};

class Lowercase : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return lowercase(s); }
};

std::string without_marks(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    if (!is_combining_mark(c)) out.append(s, i, static_cast<size_t>(n));
    i += n;
  }
  return out;
}

class StripAccents : public Normalizer {
 public:
  std::string normalize(std::string s) const override { return without_marks(s); }
};

class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string s) const override {
    size_t b = 0, e = s.size();
    if (left_)
      while (b < e && is_whitespace(decode_utf8(s, b).first)) b += static_cast<size_t>(decode_utf8(s, b).second);
    if (right_)
      while (e > b) {
        size_t p = e - 1;
        while (p > b && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
        if (!is_whitespace(decode_utf8(s, p).first)) break;
        e = p;
      }
    return s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string p) : prefix_(std::move(p)) {}
  std::string normalize(std::string s) const override { return s.empty() ? s : prefix_ + s; }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::string normalize(std::string s) const override { return replace_matches(pattern_, s, content_); }

 private:
  Regex pattern_;
  std::string content_;
};

class BertNormalizer : public Normalizer {
 public:
  BertNormalizer(bool clean, bool chinese, bool strip_accents, bool lowercase)
      : clean_(clean), chinese_(chinese), strip_(strip_accents), lower_(lowercase) {}
  std::string normalize(std::string s) const override {
    if (clean_ || chinese_) {
      std::string out;
      for (size_t i = 0; i < s.size();) {
        auto [c, n] = decode_utf8(s, i);
        i += n;
        if (clean_ && (c == 0 || c == 0xFFFD || is_control(c))) continue;
        if (clean_ && is_whitespace(c)) {
          out += ' ';
        } else if (chinese_ && is_chinese_char(c)) {
          out += ' ';
          append_utf8(out, c);
          out += ' ';
        } else {
          append_utf8(out, c);
        }
      }
      s = std::move(out);
    }
    if (strip_) s = without_marks(text::normalize(s, NormalForm::kNFD));
    if (lower_) s = lowercase(s);
    return s;
  }

 private:
  bool clean_, chinese_, strip_, lower_;
};

// Marian/NMT's cleaning: ASCII control characters dropped, other spaces and separators made ' '.
class Nmt : public Normalizer {
 public:
  std::string normalize(std::string s) const override {
    std::string out;
    out.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
      const auto [c, n] = decode_utf8(s, i);
      i += static_cast<size_t>(n);
      if ((c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F || c == 0x8F || c == 0x9F)
        continue;
      const bool space = c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
                         (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 || c == 0xFEFF ||
                         c == 0xFFFD;
      if (space) out.push_back(' ');
      else append_utf8(out, c);
    }
    return out;
  }
};

// Every byte as the printable character GPT-2's byte-level alphabet gives it.
class ByteLevelNormalizer : public Normalizer {
 public:
  std::string normalize(std::string s) const override {
    const auto& table = byte_to_unicode();
    std::string out;
    out.reserve(s.size() * 2);
    for (const char b : s) out += table[static_cast<unsigned char>(b)];
    return out;
  }
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  std::string normalize(std::string s) const override {
    for (const auto& p : parts_) s = p->normalize(std::move(s));
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

/// {"String": "..."} or {"Regex": "..."} as a compiled pattern.
Regex pattern_of(const JsonField& j) {
  if (j.has("String")) return Regex(quote_regex(j["String"].str()), j.where());
  if (j.has("Regex")) return Regex(j["Regex"].str(), j.where() + ".Regex");
  j.fail("{\"String\": ...} or {\"Regex\": ...}");
}

std::unique_ptr<Normalizer> make_normalizer(const JsonField& j) {
  const auto t = j.type("normalizer", {"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "StripAccents", "Strip", "Prepend",
                                       "Replace", "BertNormalizer", "Precompiled", "Nmt", "ByteLevel",
                                       "Sequence"});
  if (t == "NFC") return std::make_unique<FormNormalizer>(NormalForm::kNFC);
  if (t == "NFD") return std::make_unique<FormNormalizer>(NormalForm::kNFD);
  if (t == "NFKC") return std::make_unique<FormNormalizer>(NormalForm::kNFKC);
  if (t == "NFKD") return std::make_unique<FormNormalizer>(NormalForm::kNFKD);
  if (t == "Lowercase") return std::make_unique<Lowercase>();
  if (t == "StripAccents") return std::make_unique<StripAccents>();
  if (t == "Strip") return std::make_unique<Strip>(j.boolean("strip_left", true), j.boolean("strip_right", true));
  if (t == "Prepend") return std::make_unique<Prepend>(j["prepend"].str());
  if (t == "Replace") return std::make_unique<Replace>(pattern_of(j["pattern"]), j["content"].str());
  if (t == "Precompiled") return make_precompiled(j);
  if (t == "Nmt") return std::make_unique<Nmt>();
  if (t == "ByteLevel") return std::make_unique<ByteLevelNormalizer>();
  if (t == "BertNormalizer") {
    const bool lower = j.boolean("lowercase", true);
    // strip_accents null: follows lowercase (BERT's rule).
    return std::make_unique<BertNormalizer>(j.boolean("clean_text", true), j.boolean("handle_chinese_chars", true),
                                            j.boolean("strip_accents", lower), lower);
  }
  std::vector<std::unique_ptr<Normalizer>> parts;
  const auto list = j["normalizers"];
  for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_normalizer(list[i]));
  return std::make_unique<SequenceNormalizer>(std::move(parts));
}

}  // namespace colossal::text
