// A model directory's tokenizer as GGUF metadata: SentencePiece ("llama") or byte-level BPE
// ("gpt2"), laid out as llama.cpp's converter (convert_hf_to_gguf.py with gguf's SpecialVocab) lays
// them out, so that its reader (and ours) rebuild the same tokenizer.
#include "llama/gguf_vocab_export.h"

#include <map>
#include <optional>
#include <nlohmann/json.hpp>

#include "core/common/check.h"
#include "core/common/fs.h"
#include "llama/gguf_pre_splits.h"
#include "llama/tokenizer.h"
#include "text/hf_tokenizer.h"

namespace colossal::llama {
namespace gguf_vocab {  // named: the unity build puts the exporter's helpers beside these

// The chat template: tokenizer_config.json's, else chat_template.jinja's (where transformers 5
// saves it), as the converter takes them.
std::string chat_template_of(const std::string& dir, const text::TokenizerConfig& config) {
  if (!config.chat_template.empty()) return config.chat_template;
  return fs::exists(dir + "/chat_template.jinja") ? fs::read_file(dir + "/chat_template.jinja") : "";
}


void add_sentencepiece_vocab(checkpoint::GgufWriter& out, const std::string& dir, const LlamaConfig& c) {
  const std::string spm = dir + "/tokenizer.model";
  const auto tok = Tokenizer::load(spm);
  COLOSSAL_CHECK(tok.vocab_size() <= c.vocab_size, "[gguf] ", spm, " has ", tok.vocab_size(),
                 " pieces, more than the model's vocab_size ", c.vocab_size);
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < c.vocab_size; ++i) {
    if (i >= tok.vocab_size()) {  // rows of the embedding past the vocabulary (padding): unused pieces
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      scores.push_back(-1000.0f);
      types.push_back(5);
      continue;
    }
    tokens.push_back(tok.raw_piece(i));
    scores.push_back(tok.score(i));
    // GGUF's token types are SentencePiece's: 1 normal, 2 unknown, 3 control, 4 user defined,
    // 5 unused, 6 byte.
    switch (tok.kind(i)) {
      case Tokenizer::PieceKind::kUnknown: types.push_back(2); break;
      case Tokenizer::PieceKind::kControl: types.push_back(3); break;
      case Tokenizer::PieceKind::kUnused: types.push_back(5); break;
      case Tokenizer::PieceKind::kByte: types.push_back(6); break;
      default: types.push_back(1); break;
    }
  }
  // Hugging Face's added tokens (tokenizer_config.json's added_tokens_decoder), typed as llama.cpp's
  // converter types them: control when special, user defined otherwise, with a score of -1000.
  const std::string config_path = dir + "/tokenizer_config.json";
  if (fs::exists(config_path)) {
    const auto json = nlohmann::json::parse(fs::read_file(config_path), nullptr, /*allow_exceptions=*/false);
    COLOSSAL_CHECK(!json.is_discarded(), "[gguf] ", config_path, " is not JSON");
    if (json.contains("added_tokens_decoder") && json["added_tokens_decoder"].is_object())
      for (const auto& [key, token] : json["added_tokens_decoder"].items()) {
        const int64_t id = std::stoll(key);
        if (id < 0 || id >= static_cast<int64_t>(tokens.size())) continue;
        scores[static_cast<size_t>(id)] = -1000.0f;
        types[static_cast<size_t>(id)] = token.value("special", false) ? 3 : 4;
      }
  }
  out.add_string("tokenizer.ggml.model", "llama");
  out.add_string("tokenizer.ggml.pre", "default");
  out.add_strings("tokenizer.ggml.tokens", tokens);
  out.add_f32s("tokenizer.ggml.scores", scores);
  out.add_i32s("tokenizer.ggml.token_type", types);
  const auto& sp = tok.special_tokens();
  if (sp.bos) out.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*sp.bos));
  if (sp.eos) out.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*sp.eos));
  if (sp.unk) out.add_u32("tokenizer.ggml.unknown_token_id", static_cast<uint32_t>(*sp.unk));
  if (sp.pad) out.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(*sp.pad));
  const auto config = text::TokenizerConfig::read(config_path);
  out.add_bool("tokenizer.ggml.add_bos_token", config.add_bos_token.value_or(sp.bos.has_value()));
  out.add_bool("tokenizer.ggml.add_eos_token", config.add_eos_token.value_or(false));
  out.add_bool("tokenizer.ggml.add_sep_token", false);
  out.add_bool("tokenizer.ggml.add_space_prefix", tok.adds_space_prefix());
  const std::string chat_template = chat_template_of(dir, config);
  if (!chat_template.empty()) out.add_string("tokenizer.chat_template", chat_template);
}

// GGUF token types (SentencePiece's): 1 normal, 3 control, 4 user defined, 5 unused.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;

// Added tokens that llama.cpp's converter types as control even when not marked special.
bool looks_special(const std::string& t) {
  auto wrapped = [&](const std::string& open, const std::string& close) {
    return t.size() >= open.size() + close.size() && t.compare(0, open.size(), open) == 0 &&
           t.compare(t.size() - close.size(), close.size(), close) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xef\xbd\x9c", "\xef\xbd\x9c>") || wrapped("<unused", ">");
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// The pre-tokenizer's Split regexes in order, checked to end in ByteLevel (a ByteLevel with its own
// regex stands for GPT-2's split).
std::vector<std::string> split_regexes(const nlohmann::json& pre, const std::string& path) {
  std::vector<std::string> regexes;
  bool byte_level = false;
  auto visit = [&](const nlohmann::json& p) {
    const std::string type = p.value("type", "");
    if (type == "Split") {
      COLOSSAL_CHECK(p.contains("pattern") && p["pattern"].contains("Regex") && p.value("behavior", "") == "Isolated" &&
                         !p.value("invert", false),
                     "[gguf] ", path, ": a Split pre-tokenizer of ", p.dump(), "; llama.cpp's byte-level vocabularies "
                     "split by regexes that isolate their matches");
      regexes.push_back(p["pattern"]["Regex"].get<std::string>());
    } else if (type == "ByteLevel") {
      byte_level = true;
      if (p.value("use_regex", true)) regexes.push_back(gguf_pre_splits().at("gpt-2").regexes[0]);
    } else {
      COLOSSAL_FAIL("[gguf] ", path, ": pre-tokenizer '", type, "'; this version exports byte-level BPE vocabularies "
                    "(Split regexes and ByteLevel)");
    }
  };
  COLOSSAL_CHECK(pre.is_object(), "[gguf] ", path, ": no pre_tokenizer; this version exports byte-level BPE "
                 "vocabularies (Split regexes and ByteLevel)");
  if (pre.value("type", "") == "Sequence")
    for (const auto& p : pre["pretokenizers"]) visit(p);
  else
    visit(pre);
  COLOSSAL_CHECK(byte_level, "[gguf] ", path, ": the pre-tokenizer has no ByteLevel step; this version exports "
                 "byte-level BPE vocabularies");
  return regexes;
}

// Whether the post-processor puts BOS in front and EOS behind (unset: it does not say), as
// gguf's SpecialVocab reads simple templates.
void post_processor_adds(const nlohmann::json& post, const std::string& bos, const std::string& eos,
                         std::optional<bool>& add_bos, std::optional<bool>& add_eos) {
  if (!post.is_object()) return;
  std::vector<nlohmann::json> steps;
  if (post.contains("processors")) for (const auto& p : post["processors"]) steps.push_back(p);
  else steps.push_back(post);
  for (const auto& p : steps) {
    const std::string type = p.value("type", "");
    if (type == "ByteLevel") {
      if (!add_bos) add_bos = false;
      if (!add_eos) add_eos = false;
    } else if (type == "TemplateProcessing" && p.contains("single") && p["single"].size() > 1) {
      const auto& single = p["single"];
      if (single.front().contains("SpecialToken")) add_bos = single.front()["SpecialToken"].value("id", "") == bos;
      if (single.back().contains("SpecialToken")) add_eos = single.back()["SpecialToken"].value("id", "") == eos;
    }
  }
}

void add_byte_level_vocab(checkpoint::GgufWriter& out, const std::string& dir, const LlamaConfig& c) {
  const std::string path = dir + "/tokenizer.json";
  const auto j = nlohmann::json::parse(fs::read_file(path), nullptr, /*allow_exceptions=*/false);
  COLOSSAL_CHECK(!j.is_discarded() && j.is_object(), "[gguf] ", path, " is not JSON");
  const auto& model = j.contains("model") ? j["model"] : nlohmann::json();
  const std::string type = model.is_object() ? model.value("type", "") : "";
  COLOSSAL_CHECK(type == "BPE", "[gguf] ", path, ": model type '", type, "'; this version exports SentencePiece "
                 "(tokenizer.model) and byte-level BPE vocabularies");
  const auto regexes = split_regexes(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : nlohmann::json(), path);
  const bool ignore_merges = model.value("ignore_merges", false);
  const std::string pre = gguf_pre_name(regexes, ignore_merges);
  if (pre.empty()) {
    std::string known;
    for (const auto& [name, s] : gguf_pre_splits()) known += (known.empty() ? "" : ", ") + name;
    std::string given;
    for (const auto& r : regexes) given += (given.empty() ? "" : " then ") + r;
    COLOSSAL_FAIL("[gguf] ", path, ": the pre-tokenizer splits by ", given, "; llama.cpp names no such split "
                  "(tokenizer.ggml.pre knows ", known, ")");
  }
  // Tokens by id: the vocabulary and the added tokens; ids the model has but the tokenizer lacks
  // are unused padding, as the converter writes them.
  std::map<int64_t, std::string> by_id;
  for (const auto& [token, id] : model["vocab"].items()) by_id[id.get<int64_t>()] = token;
  std::map<int64_t, bool> added;  // id -> special
  if (j.contains("added_tokens"))
    for (const auto& t : j["added_tokens"]) {
      const int64_t id = t.value("id", int64_t{-1});
      by_id[id] = t.value("content", "");
      added[id] = t.value("special", false);
    }
  COLOSSAL_CHECK(!by_id.empty() && by_id.rbegin()->first < c.vocab_size, "[gguf] ", path, ": token id ",
                 by_id.empty() ? 0 : by_id.rbegin()->first, " is outside the model's vocab_size ", c.vocab_size);
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < c.vocab_size; ++i) {
    auto it = by_id.find(i);
    if (it == by_id.end()) {
      tokens.push_back("[PAD" + std::to_string(i) + "]");
      types.push_back(kUnused);
      continue;
    }
    auto a = added.find(i);
    if (a == added.end()) {
      tokens.push_back(it->second);
      types.push_back(kNormal);
    } else if (a->second || looks_special(it->second)) {
      tokens.push_back(it->second);
      types.push_back(kControl);
    } else {  // llama.cpp reads user-defined tokens as text: SentencePiece's space mark becomes a space
      tokens.push_back(replace_all(it->second, "\xe2\x96\x81", " "));
      types.push_back(kUserDefined);
    }
  }
  // Merges: "a b" strings, or pairs (tokenizers since 0.20), whose spaces llama.cpp reads as U+0120.
  std::vector<std::string> merges;
  for (const auto& m : model["merges"]) {
    if (m.is_string()) {
      merges.push_back(m.get<std::string>());
      continue;
    }
    COLOSSAL_CHECK(m.is_array() && m.size() == 2, "[gguf] ", path, ": a merge ", m.dump(), " is not a pair");
    merges.push_back(replace_all(m[0].get<std::string>(), " ", "\xc4\xa0") + " " +
                     replace_all(m[1].get<std::string>(), " ", "\xc4\xa0"));
  }
  out.add_string("tokenizer.ggml.model", "gpt2");
  out.add_string("tokenizer.ggml.pre", pre);
  out.add_strings("tokenizer.ggml.tokens", tokens);
  out.add_i32s("tokenizer.ggml.token_type", types);
  out.add_strings("tokenizer.ggml.merges", merges);

  // Special ids: tokenizer_config.json's names among the added tokens, else config.json's ids.
  const std::string config_path = dir + "/tokenizer_config.json";
  const auto config = text::TokenizerConfig::read(config_path);
  auto added_id = [&](const std::string& name) -> std::optional<int64_t> {
    if (name.empty()) return std::nullopt;
    for (const auto& [id, special] : added)
      if (by_id[id] == name) return id;
    return std::nullopt;
  };
  const auto hf = nlohmann::json::parse(fs::read_file(dir + "/config.json"), nullptr, false);
  auto config_id = [&](const char* key) -> std::optional<int64_t> {
    if (hf.is_object() && hf.contains(key) && hf[key].is_number_integer()) {
      const int64_t id = hf[key].get<int64_t>();
      if (id >= 0 && id < c.vocab_size) return id;
    }
    return std::nullopt;
  };
  const std::pair<const char*, std::string> kinds[] = {
      {"bos", config.bos_token}, {"eos", config.eos_token}, {"unknown", config.unk_token}, {"padding", config.pad_token}};
  const char* const config_keys[] = {"bos_token_id", "eos_token_id", "unk_token_id", "pad_token_id"};
  for (size_t k = 0; k < 4; ++k) {
    auto id = added_id(kinds[k].second);
    if (!id) id = config_id(config_keys[k]);
    if (id) out.add_u32(std::string("tokenizer.ggml.") + kinds[k].first + "_token_id", static_cast<uint32_t>(*id));
  }
  std::optional<bool> add_bos, add_eos;
  post_processor_adds(j.contains("post_processor") ? j["post_processor"] : nlohmann::json(), config.bos_token,
                      config.eos_token, add_bos, add_eos);
  if (!add_bos) add_bos = config.add_bos_token;
  if (!add_eos) add_eos = config.add_eos_token;
  if (add_bos) out.add_bool("tokenizer.ggml.add_bos_token", *add_bos);
  if (add_eos) out.add_bool("tokenizer.ggml.add_eos_token", *add_eos);
  const std::string chat_template = chat_template_of(dir, config);
  if (!chat_template.empty()) out.add_string("tokenizer.chat_template", chat_template);
}

}  // namespace gguf_vocab

void add_gguf_vocabulary(checkpoint::GgufWriter& out, const std::string& dir, const LlamaConfig& c) {
  if (fs::exists(dir + "/tokenizer.model")) return gguf_vocab::add_sentencepiece_vocab(out, dir, c);
  COLOSSAL_CHECK(fs::exists(dir + "/tokenizer.json"), "[gguf] ", dir, " has neither tokenizer.model nor "
                 "tokenizer.json: the file needs its vocabulary");
  gguf_vocab::add_byte_level_vocab(out, dir, c);
}

}  // namespace colossal::llama
