#include "llama/tokenizer.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>
#include <sys/stat.h>

#include "core/common/check.h"
#include "llama/hf_tokenizer.h"
#include "core/checkpoint/gguf.h"
#include "llama/gguf.h"
#include "text/hf_tokenizer.h"

namespace colossal::llama {

Tokenizer Tokenizer::load(const std::string& model_path) {
  struct stat st {};
  COLOSSAL_CHECK(::stat(model_path.c_str(), &st) == 0, "[tokenizer] '", model_path, "' does not exist");
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = t.sp_->Load(model_path);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] '", model_path, "' is not a SentencePiece model: ", status.ToString());
  t.path_ = model_path;
  t.read_specials();
  return t;
}

Tokenizer Tokenizer::from_serialized(const std::string& model_proto, const std::string& origin) {
  Tokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  auto status = t.sp_->LoadFromSerializedProto(model_proto);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] ", origin, ": not a usable SentencePiece model: ", status.ToString());
  t.path_ = origin;
  t.read_specials();
  return t;
}

Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::read_specials() {
  auto id = [](int v) -> std::optional<int64_t> { return v >= 0 ? std::optional<int64_t>(v) : std::nullopt; };
  specials_.bos = id(sp_->bos_id());
  specials_.eos = id(sp_->eos_id());
  specials_.pad = id(sp_->pad_id());
  specials_.unk = id(sp_->unk_id());
  if (specials_.eos) specials_.eos_ids = {*specials_.eos};
}

std::vector<int64_t> Tokenizer::encode(const std::string& text, bool add_special_tokens) const {
  std::vector<int> ids;
  auto status = sp_->Encode(text, &ids);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] encoding failed: ", status.ToString());
  std::vector<int64_t> out;
  out.reserve(ids.size() + 1);
  if (add_special_tokens && specials_.bos) out.push_back(*specials_.bos);
  out.insert(out.end(), ids.begin(), ids.end());
  return out;
}

std::optional<int64_t> Tokenizer::token_to_id(const std::string& token) const {
  const int id = sp_->PieceToId(token);
  if (id == sp_->unk_id() && sp_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::map<std::string, std::string> Tokenizer::files() const { return hf_tokenizer_files(*this, 2048); }

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool) const {
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

bool Tokenizer::adds_space_prefix() const {
  // Read from behaviour rather than from the normalizer spec: a lone letter comes back as "▁a".
  std::vector<std::string> pieces;
  auto status = sp_->Encode("a", &pieces);
  COLOSSAL_CHECK(status.ok(), "[tokenizer] encoding failed: ", status.ToString());
  return !pieces.empty() && pieces[0].rfind("\xE2\x96\x81", 0) == 0;
}

Tokenizer::PieceKind Tokenizer::kind(int64_t id) const {
  const int i = static_cast<int>(id);
  if (sp_->IsUnknown(i)) return PieceKind::kUnknown;
  if (sp_->IsControl(i)) return PieceKind::kControl;
  if (sp_->IsByte(i)) return PieceKind::kByte;
  if (sp_->IsUnused(i)) return PieceKind::kUnused;
  return PieceKind::kNormal;
}

int64_t Tokenizer::vocab_size() const { return sp_->GetPieceSize(); }

bool has_tokenizer(const std::string& dir) {
  struct stat st {};
  return ::stat((dir + "/tokenizer.json").c_str(), &st) == 0 || ::stat((dir + "/tokenizer.model").c_str(), &st) == 0;
}

std::unique_ptr<text::Tokenizer> load_tokenizer(const std::string& path) {
  struct stat st {};
  COLOSSAL_CHECK(::stat(path.c_str(), &st) == 0, "[tokenizer] '", path, "' does not exist");
  if (S_ISDIR(st.st_mode)) {
    if (::stat((path + "/tokenizer.json").c_str(), &st) == 0) return text::HfTokenizer::from_directory(path);
    if (::stat((path + "/tokenizer.model").c_str(), &st) == 0)
      return std::make_unique<Tokenizer>(Tokenizer::load(path + "/tokenizer.model"));
    COLOSSAL_FAIL("[tokenizer] '", path, "' has neither tokenizer.json nor tokenizer.model");
  }
  if (is_gguf_path(path)) return gguf_text_tokenizer(*checkpoint::GgufFile::open(path));
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    // A tokenizer.json given by path: its tokenizer_config.json, if any, sits beside it.
    const auto slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
    if (path.substr(slash + 1) == "tokenizer.json") return text::HfTokenizer::from_directory(dir);
    return text::HfTokenizer::from_file(path);
  }
  return std::make_unique<Tokenizer>(Tokenizer::load(path));
}

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
