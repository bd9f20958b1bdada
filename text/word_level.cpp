// WordLevel: each pre-tokenized piece is one vocabulary entry, or the unknown token.
#include "core/common/check.h"
#include "text/components.h"
#include "text/vocab.h"

namespace colossal::text {
namespace {

class WordLevel : public Model {
 public:
  explicit WordLevel(const JsonField& j) : vocab_(Vocab::from_map(j["vocab"])), where_(j.where()) {
    unk_token_ = j.str("unk_token", "<unk>");
    unk_ = vocab_.id(unk_token_);
  }

  void tokenize(const std::string& word, std::vector<int32_t>& out) const override {
    if (auto id = vocab_.id(word)) return out.push_back(*id);
    // tokenizers fails the same way: a word outside the vocabulary needs the unknown token.
    COLOSSAL_CHECK(unk_.has_value(), "[text] ", where_, ": \"", word,
                   "\" is not in the WordLevel vocabulary and its unk_token \"", unk_token_, "\" is not either");
    out.push_back(*unk_);
  }

  std::optional<int32_t> token_to_id(const std::string& t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  std::string where_, unk_token_;
  std::optional<int32_t> unk_;
};

}  // namespace

std::unique_ptr<Model> make_word_level(const JsonField& j) { return std::make_unique<WordLevel>(j); }

}  // namespace colossal::text
