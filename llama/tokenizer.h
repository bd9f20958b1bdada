#pragma once
// The SentencePiece tokenizer of a LLaMA model directory (tokenizer.model), through the
// SentencePiece library itself (Debian's libsentencepiece), and the trainer that builds one from
// a corpus. Special ids (BOS, EOS, PAD, UNK) come from the model; byte fallback is the model's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace colossal::llama {

class Tokenizer : public text::Tokenizer {
 public:
  /// Throws naming the file when it is missing or not a SentencePiece model.
  static Tokenizer load(const std::string& model_path);
  /// A SentencePiece model held in memory (a serialized ModelProto, e.g. rebuilt from a GGUF
  /// file's vocabulary); `origin` names it in errors and path().
  static Tokenizer from_serialized(const std::string& model_proto, const std::string& origin);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer() override;

  /// `add_special_tokens`: BOS in front (SentencePiece models add nothing else).
  std::vector<int64_t> encode(const std::string& text, bool add_special_tokens = true) const override;
  /// Control pieces (BOS, EOS) never show: SentencePiece skips them either way.
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const override;
  std::optional<int64_t> token_to_id(const std::string& token) const override;
  std::string id_to_token(int64_t id) const override { return raw_piece(id); }
  /// The SentencePiece piece of one id as stored ("▁the", "<0xE2>").
  std::string piece(int64_t id) const override;
  const text::SpecialTokens& special_tokens() const override { return specials_; }
  bool is_special(int64_t id) const override { return kind(id) == PieceKind::kControl; }
  const std::string& origin() const override { return path_; }
  /// tokenizer.model and the Hugging Face files that read it without SentencePiece
  /// (hf_tokenizer.h), for a model of `model_max_length` positions (2048 here).
  std::map<std::string, std::string> files() const override;

  /// The SentencePiece piece of `id` as stored ("▁the", "<0x0A>", "<s>") and its score.
  std::string raw_piece(int64_t id) const;
  float score(int64_t id) const;
  enum class PieceKind { kNormal, kUnknown, kControl, kByte, kUnused };
  PieceKind kind(int64_t id) const;
  /// Whether encoding puts "▁" in front of the text (SentencePiece's add_dummy_prefix).
  bool adds_space_prefix() const;

  int64_t vocab_size() const override;
  const std::string& path() const { return path_; }

 private:
  Tokenizer() = default;
  void read_specials();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
  text::SpecialTokens specials_;
};

/// The tokenizer a path holds: a directory's tokenizer.json (first, as transformers chooses) or
/// tokenizer.model, a tokenizer.json file, or a SentencePiece model file. Errors name what was
/// looked for.
std::unique_ptr<text::Tokenizer> load_tokenizer(const std::string& path);
/// Whether `dir` holds a tokenizer load_tokenizer reads.
bool has_tokenizer(const std::string& dir);

struct TrainTokenizerOptions {
  int64_t vocab_size = 8000;
  std::string model_type = "bpe";     // bpe | unigram
  double character_coverage = 1.0;
  bool byte_fallback = true;          // unknown characters become byte pieces (as LLaMA's)
  int64_t max_sentences = 2'000'000;  // lines sampled from the corpus
  int threads = 2;
};

/// Trains a LLaMA-style tokenizer (unk 0, bos 1, eos 2, no pad; digits split; byte fallback; text
/// taken as it is: no Unicode normalisation, runs of spaces kept) on the text files `corpus` and
/// writes <output_prefix>.model and .vocab.
void train_tokenizer(const std::vector<std::string>& corpus, const std::string& output_prefix,
                     const TrainTokenizerOptions& options = {});

}  // namespace colossal::llama
