#pragma once
// The SentencePiece tokenizer of a LLaMA model directory (tokenizer.model), through the
// SentencePiece library itself (Debian's libsentencepiece), and the trainer that builds one from
// a corpus. Special ids (BOS, EOS, PAD, UNK) come from the model; byte fallback is the model's.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace colossal::llama {

class Tokenizer {
 public:
  /// Throws naming the file when it is missing or not a SentencePiece model.
  static Tokenizer load(const std::string& model_path);
  /// A SentencePiece model held in memory (a serialized ModelProto, e.g. rebuilt from a GGUF
  /// file's vocabulary); `origin` names it in errors and path().
  static Tokenizer from_serialized(const std::string& model_proto, const std::string& origin);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  std::vector<int64_t> encode(const std::string& text, bool add_bos = true, bool add_eos = false) const;
  std::string decode(const std::vector<int64_t>& ids) const;
  /// The text piece of one id (as it joins a running decode: a leading "▁" becomes a space,
  /// byte pieces "<0xE2>" are raw bytes).
  std::string piece(int64_t id) const;

  /// The SentencePiece piece of `id` as stored ("▁the", "<0x0A>", "<s>") and its score.
  std::string raw_piece(int64_t id) const;
  float score(int64_t id) const;
  enum class PieceKind { kNormal, kUnknown, kControl, kByte, kUnused };
  PieceKind kind(int64_t id) const;

  int64_t vocab_size() const;
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t pad_id() const;  // -1 when the model has none
  int64_t unk_id() const;
  const std::string& path() const { return path_; }

 private:
  Tokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
};

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
