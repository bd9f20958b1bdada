#include "llama/hf_tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/common/check.h"

namespace colossal::llama {
namespace {

using json = nlohmann::ordered_json;
using Kind = Tokenizer::PieceKind;

// SentencePiece's BPE scores are the negated merge order (integers, falling with the id); a
// unigram model's are log-probabilities.
bool looks_like_bpe(const Tokenizer& tok) {
  float previous = INFINITY;
  int normal = 0;
  for (int64_t id = 0; id < tok.vocab_size(); ++id) {
    if (tok.kind(id) != Kind::kNormal) continue;
    const float s = tok.score(id);
    if (s != std::floor(s) || s > previous) return false;
    previous = s;
    ++normal;
  }
  return normal > 0;
}

// Byte offsets where a UTF-8 character starts, after the first.
std::vector<size_t> char_boundaries(const std::string& s) {
  std::vector<size_t> out;
  for (size_t i = 1; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xc0) != 0x80) out.push_back(i);
  return out;
}

json added_token(int64_t id, const std::string& content) {
  return {{"id", id},           {"content", content}, {"single_word", false}, {"lstrip", false},
          {"rstrip", false},    {"normalized", false}, {"special", true}};
}

}  // namespace

std::string hf_tokenizer_json(const Tokenizer& tok) {
  const int64_t n = tok.vocab_size();
  bool has_bytes = false;
  json added = json::array();
  for (int64_t id = 0; id < n; ++id) {
    const Kind k = tok.kind(id);
    has_bytes |= k == Kind::kByte;
    if (k == Kind::kUnknown || k == Kind::kControl) added.push_back(added_token(id, tok.raw_piece(id)));
  }
  const std::string unk = tok.unk_id() >= 0 ? tok.raw_piece(tok.unk_id()) : "<unk>";
  json model;
  if (looks_like_bpe(tok)) {
    json vocab = json::object();
    std::unordered_map<std::string, int64_t> ids;
    for (int64_t id = 0; id < n; ++id) {
      vocab[tok.raw_piece(id)] = id;
      if (tok.kind(id) == Kind::kNormal) ids.emplace(tok.raw_piece(id), id);
    }
    std::vector<std::tuple<int64_t, int64_t, int64_t>> merges;  // (merged, left, right)
    for (const auto& [piece, id] : ids) {
      for (size_t cut : char_boundaries(piece)) {
        auto l = ids.find(piece.substr(0, cut)), r = ids.find(piece.substr(cut));
        if (l != ids.end() && r != ids.end()) merges.emplace_back(id, l->second, r->second);
      }
    }
    std::sort(merges.begin(), merges.end());
    json list = json::array();
    for (const auto& [merged, l, r] : merges) list.push_back({tok.raw_piece(l), tok.raw_piece(r)});
    model = {{"type", "BPE"},          {"dropout", nullptr},          {"unk_token", unk},
             {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
             {"fuse_unk", true},       {"byte_fallback", has_bytes},  {"ignore_merges", false},
             {"vocab", vocab},         {"merges", list}};
  } else {
    json vocab = json::array();
    for (int64_t id = 0; id < n; ++id) vocab.push_back({tok.raw_piece(id), tok.score(id)});
    model = {{"type", "Unigram"}, {"unk_id", tok.unk_id() >= 0 ? json(tok.unk_id()) : json(nullptr)},
             {"vocab", vocab},    {"byte_fallback", has_bytes}};
  }
  json post = nullptr;
  if (tok.bos_id() >= 0) {
    const std::string bos = tok.raw_piece(tok.bos_id());
    post = {{"type", "TemplateProcessing"},
            {"single", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
            {"pair", json::array({{{"SpecialToken", {{"id", bos}, {"type_id", 0}}}},
                                  {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                  {{"SpecialToken", {{"id", bos}, {"type_id", 1}}}},
                                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
            {"special_tokens", {{bos, {{"id", bos}, {"ids", {tok.bos_id()}}, {"tokens", {bos}}}}}}};
  }
  json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                               {{"type", "ByteFallback"}},
                               {{"type", "Fuse"}},
                               {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}});
  json out = {{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added},
              {"normalizer", nullptr},
              {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"},
                                 {"split", false}}},
              {"post_processor", post},
              {"decoder", {{"type", "Sequence"}, {"decoders", decoders}}},
              {"model", model}};
  return out.dump(1) + "\n";
}

std::string hf_tokenizer_config_json(const Tokenizer& tok, int64_t model_max_length) {
  auto special = [&](int64_t id) { return id >= 0 ? json(tok.raw_piece(id)) : json(nullptr); };
  json added = json::object();
  for (int64_t id = 0; id < tok.vocab_size(); ++id) {
    const Kind k = tok.kind(id);
    if (k != Kind::kUnknown && k != Kind::kControl) continue;
    json t = added_token(id, tok.raw_piece(id));
    t.erase("id");
    added[std::to_string(id)] = t;
  }
  json out = {{"tokenizer_class", "LlamaTokenizer"},
              {"bos_token", special(tok.bos_id())},
              {"eos_token", special(tok.eos_id())},
              {"unk_token", special(tok.unk_id())},
              {"pad_token", special(tok.pad_id())},
              {"add_bos_token", tok.bos_id() >= 0},
              {"add_eos_token", false},
              {"add_prefix_space", true},
              {"legacy", true},
              {"clean_up_tokenization_spaces", false},
              {"model_max_length", model_max_length},
              {"added_tokens_decoder", added}};
  return out.dump(2) + "\n";
}

std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tok, int64_t model_max_length) {
  std::ifstream in(tok.path(), std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[tokenizer] cannot read '", tok.path(), "'");
  std::stringstream model;
  model << in.rdbuf();
  json special = json::object();
  if (tok.bos_id() >= 0) special["bos_token"] = tok.raw_piece(tok.bos_id());
  if (tok.eos_id() >= 0) special["eos_token"] = tok.raw_piece(tok.eos_id());
  if (tok.unk_id() >= 0) special["unk_token"] = tok.raw_piece(tok.unk_id());
  if (tok.pad_id() >= 0) special["pad_token"] = tok.raw_piece(tok.pad_id());
  return {{"tokenizer.model", model.str()},
          {"tokenizer.json", hf_tokenizer_json(tok)},
          {"tokenizer_config.json", hf_tokenizer_config_json(tok, model_max_length)},
          {"special_tokens_map.json", special.dump(2) + "\n"}};
}

}  // namespace colossal::llama
