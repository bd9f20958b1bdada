// Decoders: tokens back to text (ByteLevel, Metaspace, WordPiece, ByteFallback, Fuse, Strip,
// Replace, BPEDecoder, CTC, sequences).
#include <cctype>

#include "core/common/check.h"
#include "text/components.h"
#include "text/unicode.h"

namespace colossal::text {
namespace {

class ByteLevelDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const auto& t : tokens) {
      // A token whose characters all stand for bytes becomes those bytes; any other (an added
      // token outside the byte alphabet) is kept as it is.
      std::string mine;
      bool all = true;
      for (size_t i = 0; i < t.size() && all;) {
        auto [c, n] = decode_utf8(t, i);
        const int b = unicode_to_byte(c);
        all = b >= 0;
        mine += static_cast<char>(b);
        i += n;
      }
      bytes += all ? mine : t;
    }
    return {to_valid_utf8(bytes)};
  }

};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool strip_first) : rep_(std::move(rep)), strip_first_(strip_first) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const auto& t = tokens[i];
      for (size_t p = 0; p < t.size();) {
        if (t.compare(p, rep_.size(), rep_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          p += rep_.size();
        } else {
          out += t[p++];
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string rep_;
  bool strip_first_;
};

class WordPieceDecoder : public Decoder {
 public:
  WordPieceDecoder(std::string prefix, bool cleanup) : prefix_(std::move(prefix)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto& t = tokens[i];
      if (i != 0) {
        if (t.compare(0, prefix_.size(), prefix_) == 0) t = t.substr(prefix_.size());
        else t = " " + t;
      }
      if (cleanup_) t = cleanup(t);
    }
    return tokens;
  }

  static std::string cleanup(std::string s) {
    static const std::vector<std::pair<std::string, std::string>> rules = {
        {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"}, {" 'm", "'m"},
        {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
    for (const auto& [from, to] : rules) s = replace_literal(s, from, to);
    return s;
  }

 private:
  std::string prefix_;
  bool cleanup_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (valid_utf8(pending)) out.push_back(pending);
      else
        for (size_t i = 0; i < pending.size(); ++i) out.push_back("\xEF\xBF\xBD");
      pending.clear();
    };
    for (auto& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
          std::isxdigit(static_cast<unsigned char>(t[4]))) {
        pending += static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class Fuse : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, int64_t start, int64_t stop) : content_(content), start_(start), stop_(stop) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) {
      auto cps = code_points(t);
      size_t b = 0, e = cps.size();
      for (int64_t i = 0; i < start_ && b < cps.size() && cps[b] == content_; ++i) ++b;
      for (int64_t i = 0; i < stop_ && e > b && cps[e - 1] == content_; ++i) --e;
      std::string out;
      for (size_t i = b; i < e; ++i) append_utf8(out, cps[i]);
      t = std::move(out);
    }
    return tokens;
  }

 private:
  char32_t content_;
  int64_t start_, stop_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (auto& t : tokens) t = replace_matches(pattern_, t, content_);
    return tokens;
  }

 private:
  Regex pattern_;
  std::string content_;
};

class BpeDecoder : public Decoder {
 public:
  explicit BpeDecoder(std::string suffix) : suffix_(std::move(suffix)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      auto& t = tokens[i];
      const std::string with = i + 1 == tokens.size() ? "" : " ";
      if (!suffix_.empty()) t = replace_literal(t, suffix_, with);
    }
    return tokens;
  }

 private:
  std::string suffix_;
};

// CTC (speech models' output): repeated tokens collapsed, the pad token dropped, the word
// delimiter made a space (with WordPiece's cleanup when asked).
class CtcDecoder : public Decoder {
 public:
  CtcDecoder(std::string pad, std::string delimiter, bool cleanup)
      : pad_(std::move(pad)), delimiter_(std::move(delimiter)), cleanup_(cleanup) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0 && tokens[i] == tokens[i - 1]) continue;
      std::string t = replace_literal(tokens[i], pad_, "");
      if (cleanup_) t = replace_literal(WordPieceDecoder::cleanup(t), delimiter_, " ");
      if (!t.empty()) out.push_back(std::move(t));
    }
    return out;
  }

 private:
  std::string pad_, delimiter_;
  bool cleanup_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& p : parts_) tokens = p->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonField& j) {
  const auto t = j.type("decoder", {"ByteLevel", "Metaspace", "WordPiece", "ByteFallback", "Fuse", "Strip", "Replace",
                                    "BPEDecoder", "CTC", "Sequence"});
  if (t == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (t == "Metaspace") {
    std::string scheme = j.has("prepend_scheme") ? j["prepend_scheme"].str() : (j.boolean("add_prefix_space", true) ? "always" : "never");
    return std::make_unique<MetaspaceDecoder>(j.str("replacement", "\xE2\x96\x81"), scheme != "never");
  }
  if (t == "WordPiece") return std::make_unique<WordPieceDecoder>(j.str("prefix", "##"), j.boolean("cleanup", true));
  if (t == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (t == "Fuse") return std::make_unique<Fuse>();
  if (t == "Strip") {
    const auto c = code_points(j["content"].str());
    if (c.size() != 1) j["content"].fail("one character");
    return std::make_unique<StripDecoder>(c[0], j.integer("start", 0), j.integer("stop", 0));
  }
  if (t == "Replace") return std::make_unique<ReplaceDecoder>(pattern_of(j["pattern"]), j["content"].str());
  if (t == "BPEDecoder") return std::make_unique<BpeDecoder>(j.str("suffix", "</w>"));
  if (t == "CTC")
    return std::make_unique<CtcDecoder>(j.str("pad_token", "<pad>"), j.str("word_delimiter_token", "|"),
                                        j.boolean("cleanup", true));
  std::vector<std::unique_ptr<Decoder>> parts;
  const auto list = j["decoders"];
  for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_decoder(list[i]));
  return std::make_unique<SequenceDecoder>(std::move(parts));
}

}  // namespace colossal::text
