#include "text/hf_tokenizer.h"

#include <fstream>
#include <map>
#include <sstream>

#include "core/common/check.h"
#include "text/byte_trie.h"
#include "text/unicode.h"

namespace colossal::text {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[text] cannot open '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::json parse_json(const std::string& text, const std::string& origin) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    COLOSSAL_FAIL("[text] ", origin, ": not valid JSON (byte ", e.byte, "): ", e.what());
  }
}

bool exists(const std::string& path) { return std::ifstream(path).good(); }

// \w and \s as Rust's regex crate reads them (what tokenizers uses around added tokens).
bool is_word(char32_t c) { return c == '_' || is_alphanumeric(c) || is_combining_mark(c); }

// A token name in tokenizer_config.json: a string, or an added-token object with "content".
std::string token_name(const JsonField& j, const std::string& key) {
  if (!j.has(key)) return "";
  const auto v = j[key];
  if (v.value().is_string()) return v.str();
  if (v.value().is_object()) return v["content"].str();
  v.fail("a token (a string or {\"content\": ...})");
}

}  // namespace

TokenizerConfig TokenizerConfig::read(const std::string& path) {
  TokenizerConfig c;
  if (!exists(path)) return c;
  const auto json = parse_json(read_file(path), path);
  const JsonField j(json, path);
  c.bos_token = token_name(j, "bos_token");
  c.eos_token = token_name(j, "eos_token");
  c.pad_token = token_name(j, "pad_token");
  c.unk_token = token_name(j, "unk_token");
  if (j.has("add_bos_token")) c.add_bos_token = j["add_bos_token"].boolean();
  if (j.has("add_eos_token")) c.add_eos_token = j["add_eos_token"].boolean();
  if (j.has("chat_template")) {
    const auto t = j["chat_template"];
    if (t.value().is_string()) {
      c.chat_template = t.str();
    } else {
      for (size_t i = 0; i < t.size(); ++i) {
        const std::string name = t[i]["name"].str();
        c.named_templates[name] = t[i]["template"].str();
        if (name == "default") c.chat_template = c.named_templates[name];
      }
    }
  }
  return c;
}

// Leftmost-longest matching of added tokens (tokens are short and few).
class HfTokenizer::Matcher {
 public:
  void add(const std::string& pattern, int32_t id) {
    if (!pattern.empty()) trie_.insert(pattern, id);
  }
  bool empty() const { return trie_.empty(); }
  /// The first match at or after `from`: (begin, end, id), or begin == npos.
  std::tuple<size_t, size_t, int32_t> find(const std::string& s, size_t from) const {
    for (size_t b = from; b < s.size(); ++b) {
      size_t longest = 0;
      int32_t id = -1;
      trie_.prefixes(s, b, [&](size_t len, int32_t i) { longest = len, id = i; });
      if (id >= 0) return {b, b + longest, id};
    }
    return {std::string::npos, 0, -1};
  }

 private:
  ByteTrie trie_;
};

HfTokenizer::HfTokenizer(const std::string& json_text, const std::string& origin, const TokenizerConfig& config)
    : origin_(origin), config_(config) {
  files_["tokenizer.json"] = json_text;
  const auto json = parse_json(json_text, origin);
  const JsonField j(json, origin);
  if (j.has("normalizer")) normalizer_ = make_normalizer(j["normalizer"]);
  if (j.has("pre_tokenizer")) pre_tokenizer_ = make_pre_tokenizer(j["pre_tokenizer"]);
  model_ = make_model(j["model"]);
  if (j.has("decoder")) decoder_ = make_decoder(j["decoder"]);

  raw_matcher_ = std::make_unique<Matcher>();
  normalized_matcher_ = std::make_unique<Matcher>();
  vocab_size_ = model_->vocab_size();
  int64_t max_id = -1;
  if (j.has("added_tokens")) {
    const auto list = j["added_tokens"];
    for (size_t i = 0; i < list.size(); ++i) {
      const auto t = list[i];
      AddedToken a;
      a.id = static_cast<int32_t>(t["id"].integer());
      a.content = t["content"].str();
      a.special = t.boolean("special", false);
      a.normalized = t.boolean("normalized", !a.special);
      a.lstrip = t.boolean("lstrip", false);
      a.rstrip = t.boolean("rstrip", false);
      a.single_word = t.boolean("single_word", false);
      if (a.content.empty()) t["content"].fail("a non-empty token");
      max_id = std::max<int64_t>(max_id, a.id);
      added_by_id_[a.id] = added_.size();
      added_by_content_[a.content] = a.id;
      if (a.special) special_ids_.insert(a.id);
      if (a.normalized) normalized_matcher_->add(normalizer_ ? normalizer_->normalize(a.content) : a.content, a.id);
      else raw_matcher_->add(a.content, a.id);
      added_.push_back(std::move(a));
    }
  }
  // Ids: the model's and the added tokens' (which may extend past it).
  vocab_size_ = std::max<int64_t>(vocab_size_, max_id + 1);

  // Special tokens by the names tokenizer_config.json gives.
  auto id_of = [&](const std::string& name, const char* what) -> std::optional<int64_t> {
    if (name.empty()) return std::nullopt;
    auto id = token_to_id(name);
    COLOSSAL_CHECK(id.has_value(), "[text] ", origin_, ": the ", what, " \"", name, "\" named by tokenizer_config.json is not in the vocabulary");
    return id;
  };
  specials_.bos = id_of(config_.bos_token, "bos_token");
  specials_.eos = id_of(config_.eos_token, "eos_token");
  specials_.pad = id_of(config_.pad_token, "pad_token");
  specials_.unk = id_of(config_.unk_token, "unk_token");
  if (specials_.eos) specials_.eos_ids = {*specials_.eos};

  // The post-processor of tokenizer.json is the one that runs: transformers (5.x) drops
  // add_bos_token / add_eos_token from tokenizer_config.json when a tokenizer.json is there.
  if (j.has("post_processor")) post_processor_ = make_post_processor(j["post_processor"]);
}

HfTokenizer::~HfTokenizer() = default;

std::map<std::string, std::string> HfTokenizer::special_token_names() const {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : std::map<std::string, std::string>{{"bos_token", config_.bos_token}, {"eos_token", config_.eos_token},
                                                                {"pad_token", config_.pad_token}, {"unk_token", config_.unk_token}})
    if (!v.empty()) out[k] = v;
  return out;
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_file(const std::string& path) {
  return std::make_unique<HfTokenizer>(read_file(path), path);
}

std::unique_ptr<HfTokenizer> HfTokenizer::from_directory(const std::string& dir) {
  const std::string path = dir + "/tokenizer.json";
  COLOSSAL_CHECK(exists(path), "[text] '", dir, "' has no tokenizer.json");
  auto config = TokenizerConfig::read(dir + "/tokenizer_config.json");
  if (config.chat_template.empty() && exists(dir + "/chat_template.jinja")) config.chat_template = read_file(dir + "/chat_template.jinja");
  auto tok = std::make_unique<HfTokenizer>(read_file(path), path, config);
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"})
    if (exists(dir + "/" + name)) tok->files_[name] = read_file(dir + "/" + name);
  return tok;
}

void HfTokenizer::split_added(std::vector<Segment>& segments, const Matcher& matcher) const {
  if (matcher.empty()) return;
  std::vector<Segment> out;
  for (auto& seg : segments) {
    if (seg.token >= 0) {
      out.push_back(std::move(seg));
      continue;
    }
    const std::string& s = seg.text;
    size_t done = 0;   // everything before this is emitted
    size_t search = 0;
    while (true) {
      auto [b, e, id] = matcher.find(s, search);
      if (b == std::string::npos) break;
      search = e;  // a match rejected below is not searched again (as tokenizers' matcher)
      const auto& tok = added_[added_by_id_.at(id)];
      if (tok.single_word) {
        const bool word_before = b > 0 && [&] {
          size_t p = b - 1;
          while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
          return is_word(decode_utf8(s, p).first);
        }();
        const bool word_after = e < s.size() && is_word(decode_utf8(s, e).first);
        if (word_before || word_after) continue;
      }
      if (tok.lstrip) {
        size_t nb = b;
        while (nb > done) {
          size_t p = nb - 1;
          while (p > done && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
          if (!is_whitespace(decode_utf8(s, p).first)) break;
          nb = p;
        }
        b = nb;
      }
      if (tok.rstrip)
        while (e < s.size() && is_whitespace(decode_utf8(s, e).first)) e += static_cast<size_t>(decode_utf8(s, e).second);
      if (done < b) out.push_back({s.substr(done, b - done), -1, seg.at_start && done == 0});
      out.push_back({s.substr(b, e - b), id, false});
      done = e;
      search = e;  // past what rstrip took too
    }
    if (done < s.size()) out.push_back({s.substr(done), -1, seg.at_start && done == 0});
  }
  segments = std::move(out);
}

std::vector<int64_t> HfTokenizer::encode(const std::string& input, bool add_special_tokens) const {
  std::vector<Segment> segments{{to_valid_utf8(input), -1, true}};
  split_added(segments, *raw_matcher_);
  if (normalizer_)
    for (auto& seg : segments)
      if (seg.token < 0) seg.text = normalizer_->normalize(std::move(seg.text));
  split_added(segments, *normalized_matcher_);
  std::vector<int32_t> ids;
  std::vector<Piece> pieces;
  for (const auto& seg : segments) {
    if (seg.token >= 0) {
      ids.push_back(seg.token);
      continue;
    }
    if (seg.text.empty()) continue;
    pieces.assign(1, Piece{seg.text, seg.at_start});
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
    for (const auto& p : pieces)
      if (!p.text.empty()) model_->tokenize(p.text, ids);
  }
  if (add_special_tokens && post_processor_) ids = post_processor_->process(std::move(ids));
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string HfTokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    std::string t = id_to_token(id);
    if (!t.empty()) tokens.push_back(std::move(t));
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) out += (i ? " " : "") + tokens[i];
    return out;
  }
  std::string out;
  for (auto& t : decoder_->decode_chain(std::move(tokens))) out += t;
  return out;
}

std::optional<int64_t> HfTokenizer::token_to_id(const std::string& token) const {
  auto it = added_by_content_.find(token);
  if (it != added_by_content_.end()) return it->second;
  auto id = model_->token_to_id(token);
  if (!id) return std::nullopt;
  return *id;
}

std::string HfTokenizer::id_to_token(int64_t id) const {
  auto it = added_by_id_.find(static_cast<int32_t>(id));
  if (it != added_by_id_.end()) return added_[it->second].content;
  return model_->id_to_token(static_cast<int32_t>(id)).value_or("");
}

}  // namespace colossal::text
