// Byte-pair encoding as Hugging Face's BPE model: characters (with the continuing-subword prefix
// and end-of-word suffix), byte fallback or a (fused) unknown token for characters outside the
// vocabulary, then the lowest-ranked merge, leftmost first, until none applies.
#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "core/common/check.h"
#include "text/components.h"
#include "text/unicode.h"
#include "text/vocab.h"

namespace colossal::text {
namespace {

struct PairHash {
  size_t operator()(uint64_t k) const { return std::hash<uint64_t>()(k * 0x9E3779B97F4A7C15ull); }
};

class Bpe : public Model {
 public:
  explicit Bpe(const JsonField& j) : vocab_(Vocab::from_map(j["vocab"])) {
    if (j.has("unk_token")) {
      unk_ = vocab_.id(j["unk_token"].str());
      COLOSSAL_CHECK(unk_.has_value(), "[text] ", j["unk_token"].where(), ": the unknown token \"", j["unk_token"].str(),
                     "\" is not in the vocabulary");
    }
    prefix_ = j.str("continuing_subword_prefix", "");
    suffix_ = j.str("end_of_word_suffix", "");
    fuse_unk_ = j.boolean("fuse_unk", false);
    byte_fallback_ = j.boolean("byte_fallback", false);
    ignore_merges_ = j.boolean("ignore_merges", false);
    if (j.has("dropout") && j["dropout"].number() > 0) j["dropout"].fail("null or 0 (dropout is for training)");
    const auto merges = j["merges"];
    merges_.reserve(merges.size());
    for (size_t r = 0; r < merges.size(); ++r) {
      const auto m = merges[r];
      std::string a, b;
      if (m.value().is_string()) {  // "a b"
        const std::string s = m.str();
        const auto sp = s.find(' ');
        if (sp == std::string::npos) m.fail("a merge \"left right\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {  // ["a", "b"]
        if (!m.value().is_array() || m.size() != 2) m.fail("a merge \"left right\" or [left, right]");
        a = m[0].str();
        b = m[1].str();
      }
      const auto ia = vocab_.id(a), ib = vocab_.id(b);
      const std::string merged = a + (prefix_.size() && b.compare(0, prefix_.size(), prefix_) == 0 ? b.substr(prefix_.size()) : b);
      const auto im = vocab_.id(merged);
      COLOSSAL_CHECK(ia && ib && im, "[text] ", m.where(), ": the merge \"", a, "\" + \"", b, "\" uses a token outside the vocabulary");
      merges_.emplace(key(*ia, *ib), std::make_pair(static_cast<int32_t>(r), *im));
    }
  }

  void tokenize(const std::string& piece, std::vector<int32_t>& out) const override {
    if (piece.empty()) return;
    if (ignore_merges_)
      if (auto id = vocab_.id(piece)) {
        out.push_back(*id);
        return;
      }
    {
      std::shared_lock lock(cache_mutex_);
      auto it = cache_.find(piece);
      if (it != cache_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.end());
        return;
      }
    }
    auto ids = merge_word(piece);
    out.insert(out.end(), ids.begin(), ids.end());
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheLimit) cache_.emplace(piece, std::move(ids));
  }

  std::optional<int32_t> token_to_id(const std::string& t) const override { return vocab_.id(t); }
  std::optional<std::string> id_to_token(int32_t id) const override { return vocab_.token(id); }
  int64_t vocab_size() const override { return vocab_.size(); }

 private:
  static constexpr size_t kCacheLimit = 100000;
  static uint64_t key(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }

  std::vector<int32_t> merge_word(const std::string& w) const {
    std::vector<int32_t> sym;
    int32_t pending_unk = -1;  // an unknown token not yet added (fused with the next one)
    const auto lengths = char_lengths(w);
    size_t i = 0;
    for (size_t k = 0; k < lengths.size(); ++k) {
      std::string s = w.substr(i, static_cast<size_t>(lengths[k]));
      i += static_cast<size_t>(lengths[k]);
      if (k > 0) s = prefix_ + s;
      if (k + 1 == lengths.size()) s += suffix_;
      if (auto id = vocab_.id(s)) {
        if (pending_unk >= 0) {
          sym.push_back(pending_unk);
          pending_unk = -1;
        }
        sym.push_back(*id);
        continue;
      }
      if (byte_fallback_ && vocab_.append_byte_tokens(s, sym)) continue;
      if (unk_) {
        if (pending_unk >= 0 && !fuse_unk_) sym.push_back(pending_unk);
        pending_unk = *unk_;
      }
    }
    if (pending_unk >= 0) sym.push_back(pending_unk);
    // Lowest rank first, leftmost among equals (as a priority queue over (rank, position)).
    while (sym.size() > 1) {
      int32_t best_rank = INT32_MAX, best_id = -1;
      size_t best = 0;
      for (size_t p = 0; p + 1 < sym.size(); ++p) {
        auto it = merges_.find(key(sym[p], sym[p + 1]));
        if (it != merges_.end() && it->second.first < best_rank) {
          best_rank = it->second.first;
          best_id = it->second.second;
          best = p;
        }
      }
      if (best_id < 0) break;
      sym[best] = best_id;
      sym.erase(sym.begin() + static_cast<std::ptrdiff_t>(best) + 1);
    }
    return sym;
  }

  Vocab vocab_;
  std::optional<int32_t> unk_;
  std::string prefix_, suffix_;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>, PairHash> merges_;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<int32_t>> cache_;
};

}  // namespace

std::unique_ptr<Model> make_bpe(const JsonField& j) { return std::make_unique<Bpe>(j); }

}  // namespace colossal::text
