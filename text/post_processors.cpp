// Post-processors: the special tokens around a sequence (TemplateProcessing, BERT's and
// RoBERTa's), and the model factory.
#include "core/common/check.h"
#include "text/components.h"

namespace colossal::text {

std::unique_ptr<Model> make_bpe(const JsonField& j);
std::unique_ptr<Model> make_wordpiece(const JsonField& j);
std::unique_ptr<Model> make_unigram(const JsonField& j);
std::unique_ptr<Model> make_word_level(const JsonField& j);

std::unique_ptr<Model> make_model(const JsonField& j) {
  const auto t = j.type("model", {"BPE", "WordPiece", "Unigram", "WordLevel"});
  if (t == "BPE") return make_bpe(j);
  if (t == "WordPiece") return make_wordpiece(j);
  if (t == "WordLevel") return make_word_level(j);
  return make_unigram(j);
}

namespace {

// Ids before and after the sequence.
class Surround : public PostProcessor {
 public:
  Surround(std::vector<int32_t> before, std::vector<int32_t> after) : before_(std::move(before)), after_(std::move(after)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    std::vector<int32_t> out(before_);
    out.insert(out.end(), ids.begin(), ids.end());
    out.insert(out.end(), after_.begin(), after_.end());
    return out;
  }

 private:
  std::vector<int32_t> before_, after_;
};

class Identity : public PostProcessor {
 public:
  std::vector<int32_t> process(std::vector<int32_t> ids) const override { return ids; }
};

class SequenceProcessor : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  std::vector<int32_t> process(std::vector<int32_t> ids) const override {
    for (const auto& p : parts_) ids = p->process(std::move(ids));
    return ids;
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

int32_t token_id_pair(const JsonField& j) {  // ["[SEP]", 102]
  if (j.size() != 2) j.fail("[token, id]");
  return static_cast<int32_t>(j[1].integer());
}

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const JsonField& j) {
  const auto t = j.type("post-processor", {"TemplateProcessing", "BertProcessing", "RobertaProcessing", "ByteLevel", "Sequence"});
  if (t == "ByteLevel") return std::make_unique<Identity>();  // offsets only
  if (t == "BertProcessing" || t == "RobertaProcessing") {
    const int32_t cls = token_id_pair(j["cls"]), sep = token_id_pair(j["sep"]);
    return std::make_unique<Surround>(std::vector<int32_t>{cls}, std::vector<int32_t>{sep});
  }
  if (t == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    const auto list = j["processors"];
    for (size_t i = 0; i < list.size(); ++i) parts.push_back(make_post_processor(list[i]));
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  // TemplateProcessing: the single-sequence template, special tokens by name.
  const auto single = j["single"];
  const auto specials = j["special_tokens"];
  std::vector<int32_t> before, after;
  bool seen_sequence = false;
  for (size_t i = 0; i < single.size(); ++i) {
    const auto piece = single[i];
    if (piece.has("Sequence")) {
      if (piece["Sequence"]["id"].str() != "A") piece["Sequence"]["id"].fail("\"A\" in a single-sequence template");
      seen_sequence = true;
      continue;
    }
    const std::string name = piece["SpecialToken"]["id"].str();
    if (!specials.has(name)) piece["SpecialToken"]["id"].fail("a name listed in special_tokens");
    const auto ids = specials[name]["ids"];
    for (size_t k = 0; k < ids.size(); ++k) (seen_sequence ? after : before).push_back(static_cast<int32_t>(ids[k].integer()));
  }
  if (!seen_sequence) single.fail("a template holding the sequence $A");
  return std::make_unique<Surround>(std::move(before), std::move(after));
}

}  // namespace colossal::text
