// Pre-tokenizers: how the normalized text is cut into the pieces the model sees.
#include "core/common/check.h"
#include "text/components.h"
#include "text/unicode.h"

namespace colossal::text {
namespace {

// Replaces each piece by its sub-pieces [b, e); only a sub-piece at offset 0 keeps at_start.
template <class SplitFn>
void split_each(std::vector<Piece>& pieces, SplitFn&& split) {
  std::vector<Piece> out;
  for (auto& p : pieces) {
    for (auto [b, e] : split(p.text)) {
      if (e <= b) continue;
      out.push_back({p.text.substr(b, e - b), p.at_start && b == 0});
    }
  }
  pieces = std::move(out);
}

// Matches of a character predicate as delimiters, one character each.
template <class Pred>
std::vector<std::pair<size_t, size_t>> char_matches(const std::string& s, Pred&& pred) {
  std::vector<std::pair<size_t, size_t>> m;
  for (size_t i = 0; i < s.size();) {
    auto [c, n] = decode_utf8(s, i);
    if (pred(c)) m.emplace_back(i, i + n);
    i += n;
  }
  return m;
}

constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevel : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex) : prefix_(add_prefix_space), use_regex_(use_regex), regex_(kGpt2Pattern) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces)
      if (prefix_ && !p.text.empty() && p.text[0] != ' ') p.text.insert(p.text.begin(), ' ');
    if (use_regex_)
      split_each(pieces, [&](const std::string& s) { return split_by(s.size(), regex_.find_all(s), SplitBehavior::kIsolated); });
    const auto& table = byte_to_unicode();
    for (auto& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped += table[b];
      p.text = std::move(mapped);
    }
  }

 private:
  bool prefix_, use_regex_;
  Regex regex_;
};

class Split : public PreTokenizer {
 public:
  Split(Regex pattern, SplitBehavior behavior, bool invert) : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) { return split_by(s.size(), pattern_.find_all(s), behavior_, invert_); });
  }

 private:
  Regex pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

class Metaspace : public PreTokenizer {
 public:
  Metaspace(std::string replacement, std::string scheme, bool split)
      : rep_(std::move(replacement)), scheme_(std::move(scheme)), split_(split) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (auto& p : pieces) {
      std::string s;
      for (char c : p.text) {
        if (c == ' ') s += rep_;
        else s += c;
      }
      const bool starts = s.compare(0, rep_.size(), rep_) == 0;
      if (!starts && (scheme_ == "always" || (scheme_ == "first" && p.at_start))) s = rep_ + s;
      p.text = std::move(s);
    }
    if (!split_) return;
    split_each(pieces, [&](const std::string& s) {
      std::vector<std::pair<size_t, size_t>> m;
      for (size_t i = s.find(rep_); i != std::string::npos; i = s.find(rep_, i + rep_.size())) m.emplace_back(i, i + rep_.size());
      return split_by(s.size(), m, SplitBehavior::kMergedWithNext);
    });
  }

 private:
  std::string rep_, scheme_;
  bool split_;
};

class Whitespace : public PreTokenizer {
 public:
  // tokenizers compiles \w+|[^\w\s]+ with Rust's regex crate, whose \w (UTS #18) is wider than
  // Oniguruma's: Alphabetic (letter numbers, circled letters), marks, decimal digits, connector
  // punctuation and the joiners ZWNJ/ZWJ. Spelled out so PCRE2 gives the same classes.
  Whitespace()
      : regex_(R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|)"
               R"([^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\p{White_Space}]+)") {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) { return split_by(s.size(), regex_.find_all(s), SplitBehavior::kRemoved, true); });
  }

 private:
  Regex regex_;
};

class WhitespaceSplit : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [](const std::string& s) { return split_by(s.size(), char_matches(s, is_whitespace), SplitBehavior::kRemoved); });
  }
};

class BertPreTokenizer : public PreTokenizer {
 public:
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [](const std::string& s) { return split_by(s.size(), char_matches(s, is_whitespace), SplitBehavior::kRemoved); });
    split_each(pieces, [](const std::string& s) { return split_by(s.size(), char_matches(s, is_bert_punctuation), SplitBehavior::kIsolated); });
  }
};

class Punctuation : public PreTokenizer {
 public:
  explicit Punctuation(SplitBehavior b) : behavior_(b) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) { return split_by(s.size(), char_matches(s, is_bert_punctuation), behavior_); });
  }

 private:
  SplitBehavior behavior_;
};

class Digits : public PreTokenizer {
 public:
  explicit Digits(bool individual) : individual_(individual) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    const auto behavior = individual_ ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
    split_each(pieces, [&](const std::string& s) { return split_by(s.size(), char_matches(s, is_numeric), behavior); });
  }

 private:
  bool individual_;
};

class CharDelimiterSplit : public PreTokenizer {
 public:
  explicit CharDelimiterSplit(char32_t d) : delim_(d) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](const std::string& s) {
      return split_by(s.size(), char_matches(s, [&](char32_t c) { return c == delim_; }), SplitBehavior::kRemoved);
    });
  }

 private:
  char32_t delim_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// Metaspace's prepend_scheme, or the older add_prefix_space flag.
std::string prepend_scheme(const JsonField& j) {
  if (j.has("prepend_scheme")) {
    const auto s = j["prepend_scheme"].str();
    if (s != "always" && s != "first" && s != "never") j["prepend_scheme"].fail("always, first or never");
    return s;
  }
  return j.boolean("add_prefix_space", true) ? "always" : "never";
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& j) {
  const auto t = j.type("pre-tokenizer", {"ByteLevel", "Split", "Metaspace", "Whitespace", "WhitespaceSplit",
                                          "BertPreTokenizer", "Punctuation", "Digits", "CharDelimiterSplit", "Sequence"});
  if (t == "ByteLevel") return std::make_unique<ByteLevel>(j.boolean("add_prefix_space", true), j.boolean("use_regex", true));
  if (t == "Split")
    return std::make_unique<Split>(pattern_of(j["pattern"]), parse_split_behavior(j["behavior"]), j.boolean("invert", false));
  if (t == "Metaspace") return std::make_unique<Metaspace>(j.str("replacement", "\xE2\x96\x81"), prepend_scheme(j), j.boolean("split", true));
  if (t == "Whitespace") return std::make_unique<Whitespace>();
  if (t == "WhitespaceSplit") return std::make_unique<WhitespaceSplit>();
  if (t == "BertPreTokenizer") return std::make_unique<BertPreTokenizer>();
  if (t == "Punctuation")
    return std::make_unique<Punctuation>(j.has("behavior") ? parse_split_behavior(j["behavior"]) : SplitBehavior::kIsolated);
  if (t == "Digits") return std::make_unique<Digits>(j.boolean("individual_digits", false));
  if (t == "CharDelimiterSplit") {
    const auto d = code_points(j["delimiter"].str());
    if (d.size() != 1) j["delimiter"].fail("one character");
    return std::make_unique<CharDelimiterSplit>(d[0]);
  }
  std::vector<std::unique_ptr<PreTokenizer>> parts;
  const auto list = j["pretokenizers"];
  for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_pre_tokenizer(list[i]));
  return std::make_unique<SequencePreTokenizer>(std::move(parts));
}

}  // namespace colossal::text
