// Unigram (SentencePiece's model, T5/XLM-R): the segmentation with the highest total score
// (Viterbi over every vocabulary entry starting at each character); a character no entry covers
// is the unknown token, scored 10 below the lowest score; adjacent unknowns fuse; with byte
// fallback an unknown piece becomes its bytes' tokens.
#include <limits>

#include "core/common/check.h"
#include "text/byte_trie.h"
#include "text/components.h"
#include "text/unicode.h"
#include "text/vocab.h"

namespace colossal::text {
namespace {

class Unigram : public Model {
 public:
  explicit Unigram(const JsonField& j) {
    const auto vocab = j["vocab"];
    for (size_t i = 0; i < vocab.size(); ++i) {
      const auto entry = vocab[i];
      if (entry.size() != 2) entry.fail("[piece, score]");
      const std::string piece = entry[0].str();
      const double score = entry[1].number();
      vocab_.add(piece, static_cast<int32_t>(i));
      scores_.push_back(score);
      trie_.insert(piece, static_cast<int32_t>(i));
      min_score_ = std::min(min_score_, score);
    }
    if (j.has("unk_id")) {
      unk_ = static_cast<int32_t>(j["unk_id"].integer());
      COLOSSAL_CHECK(*unk_ >= 0 && *unk_ < static_cast<int32_t>(scores_.size()), "[text] ", j["unk_id"].where(), ": ", *unk_,
                     " is outside the vocabulary of ", scores_.size());
    }
    byte_fallback_ = j.boolean("byte_fallback", false);
    vocab_.index_byte_tokens();
  }

  void tokenize(const std::string& s, std::vector<int32_t>& out) const override {
    if (s.empty()) return;
    struct Best {
      double score = 0;
      int64_t from = -1;
      int32_t id = -1;
    };
    const double unk_score = min_score_ - 10.0;
    std::vector<Best> best(s.size() + 1);
    best[0].from = 0;
    for (size_t at = 0; at < s.size();) {
      const double here = best[at].score;
      const size_t mblen = static_cast<size_t>(decode_utf8(s, at).second);
      bool single = false;
      trie_.prefixes(s, at, [&](size_t len, int32_t id) {
        auto& t = best[at + len];
        const double cand = scores_[static_cast<size_t>(id)] + here;
        if (t.from < 0 || cand > t.score) t = {cand, static_cast<int64_t>(at), id};
        if (len == mblen) single = true;
      });
      if (!single) {
        COLOSSAL_CHECK(unk_.has_value(), "[text] Unigram: the text has a character outside the vocabulary and the model has no unk_id");
        auto& t = best[at + mblen];
        const double cand = unk_score + here;
        if (t.from < 0 || cand > t.score) t = {cand, static_cast<int64_t>(at), *unk_};
      }
      at += mblen;
    }
    // Back from the end: pieces, adjacent unknowns fused into one.
    std::vector<std::pair<std::string, int32_t>> pieces;
    std::string unk_run;
    for (size_t end = s.size(); end > 0;) {
      const auto& node = best[end];
      const size_t from = static_cast<size_t>(node.from);
      if (unk_ && node.id == *unk_) {
        unk_run = s.substr(from, end - from) + unk_run;
      } else {
        if (!unk_run.empty()) pieces.emplace_back(std::move(unk_run), -1), unk_run.clear();
        pieces.emplace_back(s.substr(from, end - from), node.id);
      }
      end = from;
    }
    if (!unk_run.empty()) pieces.emplace_back(std::move(unk_run), -1);
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) {
      if (it->second >= 0) {
        out.push_back(it->second);
        continue;
      }
      if (auto id = vocab_.id(it->first)) {  // an "unknown" run that is itself an entry
        out.push_back(*id);
        continue;
      }
      if (byte_fallback_ && vocab_.append_byte_tokens(it->first, out)) continue;
      out.push_back(*unk_);
    }
  }

  std::optional<int32_t> token_to_id(const std::string& t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return vocab_.size(); }

 private:
  Vocab vocab_;
  std::vector<double> scores_;
  ByteTrie trie_;
  double min_score_ = std::numeric_limits<double>::infinity();
  std::optional<int32_t> unk_;
  bool byte_fallback_ = false;
};

}  // namespace

std::unique_ptr<Model> make_unigram(const JsonField& j) { return std::make_unique<Unigram>(j); }

}  // namespace colossal::text
