#pragma once
// The stages of a Hugging Face tokenizer.json, each built from its JSON object:
//   normalizer -> pre-tokenizer -> model -> post-processor    (encode)
//   ids -> tokens -> decoder                                   (decode)
// Types are Hugging Face's names; an unknown type is an error naming it and the supported ones.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "text/json_field.h"
#include "text/regex.h"

namespace colossal::text {

/// A piece of the input on its way to the model. `at_start`: it begins the input (what
/// Metaspace's prepend_scheme "first" asks).
struct Piece {
  std::string text;
  bool at_start = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual std::string normalize(std::string s) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  /// Splits (and rewrites) the pieces in place; empty pieces are dropped by the caller.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  /// The ids of one pre-tokenized piece, appended to `out`.
  virtual void tokenize(const std::string& piece, std::vector<int32_t>& out) const = 0;
  virtual std::optional<int32_t> token_to_id(const std::string& token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual int64_t vocab_size() const = 0;
};

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  /// The special tokens added around one sequence.
  virtual std::vector<int32_t> process(std::vector<int32_t> ids) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

std::unique_ptr<Normalizer> make_normalizer(const JsonField& j);
/// SentencePiece's compiled normalisation rules (precompiled.cpp).
std::unique_ptr<Normalizer> make_precompiled(const JsonField& j);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& j);
std::unique_ptr<Model> make_model(const JsonField& j);
std::unique_ptr<PostProcessor> make_post_processor(const JsonField& j);
std::unique_ptr<Decoder> make_decoder(const JsonField& j);

/// How a split keeps the delimiters it finds (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };
SplitBehavior parse_split_behavior(const JsonField& j);
/// `matches`: [begin, end) of each delimiter found in `text`, in order. Returns the pieces'
/// [begin, end), empty ones included (the caller drops them).
std::vector<std::pair<size_t, size_t>> split_by(size_t length, const std::vector<std::pair<size_t, size_t>>& matches,
                                                SplitBehavior behavior, bool invert = false);

/// {"String": "..."} or {"Regex": "..."} (a pattern field) compiled.
Regex pattern_of(const JsonField& j);

/// GPT-2's map of the 256 byte values to printable characters (ByteLevel), and back.
const std::vector<std::string>& byte_to_unicode();
/// The byte a ByteLevel character stands for, or -1.
int unicode_to_byte(char32_t c);

}  // namespace colossal::text
