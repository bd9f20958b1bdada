#pragma once
// One interface for every tokenizer a model directory can hold: Hugging Face's tokenizer.json
// (hf_tokenizer.h) and SentencePiece's tokenizer.model. Ids are int64 (what tensors take).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace colossal::text {

/// The special tokens a model names (empty: it has none).
struct SpecialTokens {
  std::optional<int64_t> bos, eos, pad, unk;
  std::vector<int64_t> eos_ids;  // every id that ends generation (eos first)
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// `add_special_tokens`: the model's own (BOS and the like), as its post-processor adds them.
  virtual std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const = 0;
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  virtual std::optional<int64_t> token_to_id(const std::string& token) const = 0;
  /// The token of `id` as the vocabulary stores it; empty when there is none.
  virtual std::string id_to_token(int64_t id) const = 0;
  /// Ids run from 0 to vocab_size() - 1 (added tokens included).
  virtual int64_t vocab_size() const = 0;
  virtual const SpecialTokens& special_tokens() const = 0;
  virtual bool is_special(int64_t id) const = 0;
  /// Where it was read from (errors and messages).
  virtual const std::string& origin() const = 0;
  /// The text one token adds to a running decode (what a stream or logprobs shows for it).
  virtual std::string piece(int64_t id) const { return decode({id}); }
  /// The files that reproduce this tokenizer in a model directory, by name.
  virtual std::map<std::string, std::string> files() const = 0;
  /// The model's chat template (Jinja), or "" when it ships none.
  virtual std::string chat_template() const { return ""; }
  /// The special tokens' text by name (bos_token, eos_token, ...), as a template sees them.
  virtual std::map<std::string, std::string> special_token_names() const { return {}; }

  /// `text` with the model's BOS in front and its EOS after, as asked (where the model has
  /// them), whatever the post-processor would add: what a training document or a chat turn takes.
  std::vector<int64_t> encode_with(const std::string& text, bool bos, bool eos) const {
    auto ids = encode(text, false);
    if (bos && special_tokens().bos) ids.insert(ids.begin(), *special_tokens().bos);
    if (eos && special_tokens().eos) ids.push_back(*special_tokens().eos);
    return ids;
  }
  int64_t bos_id() const { return special_tokens().bos.value_or(-1); }
  int64_t eos_id() const { return special_tokens().eos.value_or(-1); }
  int64_t pad_id() const { return special_tokens().pad.value_or(-1); }
  int64_t unk_id() const { return special_tokens().unk.value_or(-1); }
};

}  // namespace colossal::text
