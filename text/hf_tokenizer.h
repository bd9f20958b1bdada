#pragma once
// A Hugging Face tokenizer.json, as the `tokenizers` library runs it: added tokens matched first
// (on the raw text when not normalized, then on each normalized piece), the normalizer, the
// pre-tokenizer, the model (BPE, WordPiece, Unigram), the post-processor; decode through the
// decoder. tokenizer_config.json beside it names the special tokens. Its add_bos_token /
// add_eos_token are read but do not change encoding: as in transformers 5, the post-processor of
// tokenizer.json decides which special tokens encode() adds.
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "text/components.h"
#include "text/tokenizer.h"

namespace colossal::text {

/// What tokenizer_config.json says (the parts the runtime uses).
struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token, unk_token;  // empty: none named
  std::optional<bool> add_bos_token, add_eos_token;
  std::string chat_template;  // the default template (empty: none)
  std::map<std::string, std::string> named_templates;  // a list-valued chat_template, by name
  /// Reads `path`; a missing file gives the defaults. Errors name the file and the field.
  static TokenizerConfig read(const std::string& path);
};

class HfTokenizer : public Tokenizer {
 public:
  /// tokenizer.json text; `origin` names it in errors (a path).
  HfTokenizer(const std::string& json_text, const std::string& origin, const TokenizerConfig& config = {});
  /// A model directory's tokenizer.json and tokenizer_config.json.
  static std::unique_ptr<HfTokenizer> from_directory(const std::string& dir);
  static std::unique_ptr<HfTokenizer> from_file(const std::string& tokenizer_json);
  ~HfTokenizer() override;

  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const override;
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const override;
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override;
  int64_t vocab_size() const override { return vocab_size_; }
  const SpecialTokens& special_tokens() const override { return specials_; }
  bool is_special(int64_t id) const override { return special_ids_.count(id) > 0; }
  const std::string& origin() const override { return origin_; }
  std::map<std::string, std::string> files() const override { return files_; }
  std::string chat_template() const override { return config_.chat_template; }
  std::map<std::string, std::string> special_token_names() const override;
  const TokenizerConfig& config() const { return config_; }

 private:
  struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false, normalized = true, lstrip = false, rstrip = false, single_word = false;
  };
  struct Segment {
    std::string text;
    int32_t token = -1;  // an added token's id, or -1 for text still to tokenize
    bool at_start = false;
  };
  class Matcher;
  void split_added(std::vector<Segment>& segments, const Matcher& matcher) const;

  std::string origin_;
  TokenizerConfig config_;
  std::map<std::string, std::string> files_;  // as read: tokenizer.json, tokenizer_config.json, ...
  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::unique_ptr<Decoder> decoder_;
  std::vector<AddedToken> added_;
  std::unordered_map<int32_t, size_t> added_by_id_;
  std::unordered_map<std::string, int32_t> added_by_content_;
  std::unique_ptr<Matcher> raw_matcher_, normalized_matcher_;
  std::set<int64_t> special_ids_;
  SpecialTokens specials_;
  int64_t vocab_size_ = 0;
};

}  // namespace colossal::text
