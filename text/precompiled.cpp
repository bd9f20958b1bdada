// The Precompiled normalizer: SentencePiece's normalisation rules (nmt_nfkc and its kin), as
// T5, XLM-R, ALBERT, mBART and every Unigram tokenizer converted from a .model file carry them.
//
// `precompiled_charsmap` is base64 of SentencePiece's compiled table:
//   u32 little-endian   size in bytes of the trie
//   u32[size / 4]       a darts-clone double-array trie over UTF-8 bytes; a key's value is an offset
//   bytes               the replacement strings, each ended by a NUL, the offsets point into them
// Text is rewritten one extended grapheme cluster at a time, as Hugging Face tokenizers does it:
// a cluster shorter than 6 bytes is looked up whole; otherwise, or when it has no entry, each of
// its characters is. A lookup takes the shortest key that prefixes the text looked up (that is how
// the reference behaves, and what the tokenizers' ids follow), and the whole looked-up text gives
// way to that key's replacement.
#include <cstring>

#include "core/common/check.h"
#include "text/components.h"
#include "text/unicode.h"

namespace colossal::text {
namespace {

std::string base64_decode(const std::string& in, const std::string& where) {
  auto value = [&](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+' || c == '-') return 62;
    if (c == '/' || c == '_') return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const char c = in[i];
    if (c == '=') break;
    if (c == '\n' || c == '\r') continue;
    const int v = value(c);
    COLOSSAL_CHECK(v >= 0, "[text] ", where, ": not base64: byte ", i, " is '", c, "'");
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

class Precompiled : public Normalizer {
 public:
  Precompiled(const std::string& charsmap, const std::string& where) : where_(where) {
    const std::string raw = base64_decode(charsmap, where);
    if (raw.empty()) return;  // no rules: text passes unchanged
    COLOSSAL_CHECK(raw.size() >= 4, "[text] ", where, ": the charsmap has ", raw.size(), " bytes, expected at least 4");
    uint32_t trie_bytes = 0;
    std::memcpy(&trie_bytes, raw.data(), 4);
    COLOSSAL_CHECK(trie_bytes % 4 == 0 && trie_bytes <= raw.size() - 4, "[text] ", where, ": the charsmap's trie size ",
                   trie_bytes, " does not fit its ", raw.size() - 4, " bytes (or is not a multiple of 4)");
    units_.resize(trie_bytes / 4);
    std::memcpy(units_.data(), raw.data() + 4, trie_bytes);
    replacements_ = raw.substr(4 + trie_bytes);
    COLOSSAL_CHECK(!units_.empty(), "[text] ", where, ": the charsmap's trie is empty");
  }

  std::string normalize(std::string s) const override {
    if (units_.empty()) return s;
    std::string out;
    out.reserve(s.size());
    const std::string_view text(s);
    size_t at = 0;
    for (const size_t len : grapheme_lengths(text)) {
      const auto cluster = text.substr(at, len);
      at += len;
      if (len < 6) {
        if (const auto r = lookup(cluster)) {
          out.append(*r);
          continue;
        }
      }
      for (size_t i = 0; i < cluster.size();) {
        const auto n = static_cast<size_t>(decode_utf8(cluster, i).second);
        const auto ch = cluster.substr(i, n);
        if (const auto r = lookup(ch)) out.append(*r);
        else out.append(ch);
        i += n;
      }
    }
    return out;
  }

 private:
  // darts-clone's unit layout: label in bits 0-7 (bit 31 set on value units), has-leaf in bit 8,
  // the child offset in bits 10-30 (shifted by 8 more when bit 9 is set), a value in bits 0-30.
  static uint32_t offset(uint32_t u) { return (u >> 10) << ((u & (1u << 9)) >> 6); }
  static bool has_leaf(uint32_t u) { return (u >> 8) & 1u; }
  static uint32_t label(uint32_t u) { return u & ((1u << 31) | 0xFFu); }
  static uint32_t value(uint32_t u) { return u & ((1u << 31) - 1); }

  uint32_t unit(size_t pos) const {
    COLOSSAL_CHECK(pos < units_.size(), "[text] ", where_, ": the charsmap's trie points outside itself (unit ", pos,
                   " of ", units_.size(), ")");
    return units_[pos];
  }

  /// The replacement of the shortest key that prefixes `key`, if any.
  std::optional<std::string_view> lookup(std::string_view key) const {
    size_t pos = offset(unit(0));
    for (const char ch : key) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == 0) break;
      pos ^= c;
      const uint32_t u = unit(pos);
      if (label(u) != c) return std::nullopt;
      pos ^= offset(u);
      if (has_leaf(u)) {
        const size_t start = value(unit(pos));
        COLOSSAL_CHECK(start <= replacements_.size(), "[text] ", where_, ": a charsmap replacement starts at ", start,
                       ", past its ", replacements_.size(), " bytes");
        const size_t end = replacements_.find('\0', start);
        return std::string_view(replacements_).substr(start, end == std::string::npos ? end : end - start);
      }
    }
    return std::nullopt;
  }

  std::string where_;
  std::vector<uint32_t> units_;
  std::string replacements_;
};

}  // namespace

std::unique_ptr<Normalizer> make_precompiled(const JsonField& j) {
  const std::string map = j.has("precompiled_charsmap") ? j["precompiled_charsmap"].str() : std::string();
  return std::make_unique<Precompiled>(map, j.where() + ".precompiled_charsmap");
}

}  // namespace colossal::text
