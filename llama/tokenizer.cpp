#include "llama/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include "core/common/check.h"

namespace colossal::llama {

Tokenizer Tokenizer::load(const std::string& model_path) {
  struct stat st {};
  COLOSSAL_CHECK(::stat(model_path.c_str(), &st) == 0, "[tokenizer] '", model_path, "' does not exist");
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = t.sp_->Load(model_path);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] '", model_path, "' is not a SentencePiece model: ", status.ToString());
  t.path_ = model_path;
  return t;
}

Tokenizer Tokenizer::from_serialized(const std::string& model_proto, const std::string& origin) {
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = t.sp_->LoadFromSerializedProto(model_proto);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] ", origin, ": not a usable SentencePiece model: ", status.ToString());
  t.path_ = origin;
  return t;
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_bos, bool add_eos) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] encoding failed: ", status.ToString());
  std::vector<int64_t> out;
  out.reserve(ids.size() + 2);
  if (add_bos && bos_id() >= 0) out.push_back(bos_id());
  out.insert(out.end(), ids.begin(), ids.end());
  if (add_eos && eos_id() >= 0) out.push_back(eos_id());
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> v;
  v.reserve(ids.size());
  for (int64_t id : ids) {
    COLOSSAL_CHECK(id >= 0 && id < vocab_size(), "[tokenizer] id ", id, " is outside the vocabulary [0, ",
                   vocab_size(), ")");
    v.push_back(static_cast<int>(id));
  }
  std::string text;
  auto status = sp_->Decode(v, &text);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] decoding failed: ", status.ToString());
  return text;
}

std::string Tokenizer::piece(int64_t id) const {
  COLOSSAL_CHECK(id >= 0 && id < vocab_size(), "[tokenizer] id ", id, " is outside the vocabulary");
  return sp_->IdToPiece(static_cast<int>(id));
}

std::string Tokenizer::raw_piece(int64_t id) const {
  COLOSSAL_CHECK(id >= 0 && id < vocab_size(), "[tokenizer] id ", id, " is outside the vocabulary");
  return sp_->IdToPiece(static_cast<int>(id));
}

float Tokenizer::score(int64_t id) const { return sp_->GetScore(static_cast<int>(id)); }

Tokenizer::PieceKind Tokenizer::kind(int64_t id) const {
  const int i = static_cast<int>(id);
  if (sp_->IsUnknown(i)) return PieceKind::kUnknown;
  if (sp_->IsControl(i)) return PieceKind::kControl;
  if (sp_->IsByte(i)) return PieceKind::kByte;
  if (sp_->IsUnused(i)) return PieceKind::kUnused;
  return PieceKind::kNormal;
}

int64_t Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }
int64_t Tokenizer::bos_id() const { return sp_->bos_id(); }
int64_t Tokenizer::eos_id() const { return sp_->eos_id(); }
int64_t Tokenizer::pad_id() const { return sp_->pad_id(); }
int64_t Tokenizer::unk_id() const { return sp_->unk_id(); }

void train_tokenizer(const std::vector<std::string>& corpus, const std::string& output_prefix,
                     const TrainTokenizerOptions& o) {
  COLOSSAL_CHECK(!corpus.empty(), "[tokenizer] train_tokenizer: no corpus files");
  std::string files;
  for (const auto& f : corpus) {
    struct stat st {};
    COLOSSAL_CHECK(::stat(f.c_str(), &st) == 0, "[tokenizer] corpus file '", f, "' does not exist");
    files += (files.empty() ? "" : ",") + f;
  }
  COLOSSAL_CHECK(o.model_type == "bpe" || o.model_type == "unigram", "[tokenizer] model_type: expected bpe or unigram, got '",
                 o.model_type, "'");
  // LLaMA's conventions: unk 0, bos 1, eos 2, no pad, digits split, byte fallback, and the text as
  // it is (SentencePiece's default NFKC folding and space collapsing would make our ids differ from
  // those of Hugging Face's LLaMA tokenizer, which does neither, for the same tokenizer.json).
  std::string args = "--input=" + files + " --model_prefix=" + output_prefix +
                     " --vocab_size=" + std::to_string(o.vocab_size) + " --model_type=" + o.model_type +
                     " --character_coverage=" + std::to_string(o.character_coverage) +
                     " --byte_fallback=" + (o.byte_fallback ? "true" : "false") +
                     " --split_digits=true --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1" +
                     " --normalization_rule_name=identity --remove_extra_whitespaces=false" +
                     " --input_sentence_size=" + std::to_string(o.max_sentences) +
                     " --shuffle_input_sentence=true --num_threads=" + std::to_string(o.threads) +
                     " --minloglevel=2";
  auto status = sentencepiece::SentencePieceTrainer::Train(args);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] training on ", files, " failed: ", status.ToString());
}

}  // namespace colossal::llama
