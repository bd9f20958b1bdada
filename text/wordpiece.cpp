// WordPiece (BERT): the longest vocabulary entry from the left, continuations marked "##"; a word
// with a part outside the vocabulary, or longer than max_input_chars_per_word, is one unknown token.
#include "core/common/check.h"
#include "text/components.h"
#include "text/unicode.h"
#include "text/vocab.h"

namespace colossal::text {
namespace {

class WordPiece : public Model {
 public:
  explicit WordPiece(const JsonField& j) : vocab_(Vocab::from_map(j["vocab"])) {
    const std::string unk = j.str("unk_token", "[UNK]");
    auto id = vocab_.id(unk);
    COLOSSAL_CHECK(id.has_value(), "[text] ", j.where(), ".unk_token: \"", unk, "\" is not in the vocabulary");
    unk_ = *id;
    prefix_ = j.str("continuing_subword_prefix", "##");
    max_chars_ = j.integer("max_input_chars_per_word", 100);
  }

  void tokenize(const std::string& word, std::vector<int32_t>& out) const override {
    const auto lengths = char_lengths(word);
    if (static_cast<int64_t>(lengths.size()) > max_chars_) {
      out.push_back(unk_);
      return;
    }
    std::vector<size_t> bounds{0};  // byte offset of each character boundary
    for (int n : lengths) bounds.push_back(bounds.back() + static_cast<size_t>(n));
    std::vector<int32_t> parts;
    size_t start = 0;  // index into bounds
    while (start + 1 < bounds.size()) {
      std::optional<int32_t> found;
      size_t end = bounds.size() - 1;
      for (; end > start; --end) {
        std::string sub = word.substr(bounds[start], bounds[end] - bounds[start]);
        if (start > 0) sub = prefix_ + sub;
        if ((found = vocab_.id(sub))) break;
      }
      if (!found) {
        out.push_back(unk_);
        return;
      }
      parts.push_back(*found);
      start = end;
    }
    out.insert(out.end(), parts.begin(), parts.end());
  }

  std::optional<int32_t> token_to_id(const std::string& t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  int32_t unk_ = 0;
  std::string prefix_;
  int64_t max_chars_ = 100;
};

}  // namespace

std::unique_ptr<Model> make_wordpiece(const JsonField& j) { return std::make_unique<WordPiece>(j); }

}  // namespace colossal::text
