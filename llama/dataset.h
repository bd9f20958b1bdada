#pragma once
// Training data for LLaMA: JSONL tokenised once into a memory-mapped token file.
//
// Input lines:
//   pretraining  {"text": "..."}  or  {"source": "...", "target": "..."} (joined by a space)
//   fine-tuning  {"messages": [{"from": "human"|"assistant", "content": "..."}, ...]}
//                formatted with a chat template (LLaMA-2's by default); the loss is kept only
//                on assistant tokens.
// Every document becomes BOS + tokens + EOS. The token file (int32) and a loss-mask file (uint8)
// sit in `cache_dir` under a key hashed from the input files (path, size, mtime), the tokenizer
// file's contents and the options; a later run with the same key maps them instead of
// tokenising again, and any change makes a new key. The description (<key>.json, written last)
// records each file's size and CRC32C; a cache is used only after they, the offsets and the
// token ids (inside the tokenizer's vocabulary) check out, else it is rebuilt with a warning
// naming the file and the reason. A malformed line is reported with file and line number;
// on_bad_line = skip counts and skips it, stop throws.
//
// Samples: pretraining packs the stream into windows of max_length + 1 tokens (inputs and the
// next-token labels); fine-tuning keeps one conversation per sample, truncated to max_length+1,
// padded with labels -100; or (packing) several conversations per sample, each truncated to
// max_length, placed best-fit-decreasing into samples of max_length tokens, each starting its
// positions at 0 and attending only to itself (the model's packed batches): the same tokens and
// targets as one per sample, in fewer, fuller rows. A conversation whose replies all start past max_length would teach
// nothing (and give a step no token to average over): it is left out, with a warning that counts
// such conversations and names the first.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include <nlohmann/json.hpp>

#include "llama/tokenizer.h"

namespace colossal::llama {

struct DatasetOptions {
  std::vector<std::string> files;      // JSONL
  std::string cache_dir = "data_cache";
  std::string mode = "pretrain";       // pretrain | sft
  // sft: "auto" renders with the tokenizer's own chat template (LLaMA-2's when it has none);
  // "llama2" forces LLaMA-2's [INST] format.
  std::string chat_template = "auto";
  std::string on_bad_line = "stop";    // stop | skip
  int64_t max_length = 512;
  bool packing = false;                // sft: several conversations per sample
  void validate() const;  // files given, mode, on_bad_line, max_length >= 2, packing only in sft
};

struct Batch {
  at::Tensor input_ids;  // [B, T] int64
  at::Tensor labels;     // [B, T] int64, -100 where no loss
  at::Tensor position_ids;  // packed samples only: [B, T] int64, restarting at 0 with each document
};

class TokenDataset {
 public:
  /// Tokenises (or maps the cached result of) `options.files` with `tokenizer`.
  static TokenDataset open(const DatasetOptions& options, const text::Tokenizer& tokenizer);
  ~TokenDataset();
  TokenDataset(TokenDataset&&) noexcept;
  TokenDataset& operator=(TokenDataset&&) noexcept;

  int64_t size() const;            // samples
  int64_t num_tokens() const;
  int64_t skipped_lines() const { return skipped_; }
  /// sft: conversations left out because no reply token falls inside max_length.
  int64_t replies_past_max_length() const { return no_reply_; }
  /// sft: the conversations trained on, and (packing) the share of the samples' tokens they fill.
  int64_t conversations() const { return static_cast<int64_t>(samples_.size()); }
  double packed_fill() const { return fill_; }
  bool reused_cache() const { return reused_; }
  const std::string& cache_key() const { return key_; }
  /// Samples `indices` stacked into a batch.
  Batch batch(const std::vector<int64_t>& indices) const;

 private:
  TokenDataset() = default;
  void pack();  // packing: the conversations into samples, best fit decreasing
  struct Mapping;
  std::unique_ptr<Mapping> tokens_, mask_;
  std::vector<int64_t> doc_offsets_;  // sft: where each conversation starts (and the end)
  std::vector<int64_t> samples_;      // sft: the conversations trained on (a reply within max_length)
  std::vector<int64_t> pack_offsets_, pack_docs_;  // packing: sample p holds conversations
                                                   // pack_docs_[pack_offsets_[p] .. pack_offsets_[p + 1])
  double fill_ = 0;
  DatasetOptions options_;
  int64_t pad_id_ = 0;
  int64_t skipped_ = 0;
  int64_t no_reply_ = 0;
  bool reused_ = false;
  std::string key_;
};

/// A conversation as the chat templates read it: `roles` the messages with "role" (user,
/// assistant, system, tool), `turns` the (human | assistant, content) pairs of the built-in templates.
struct Conversation {
  nlohmann::ordered_json roles = nlohmann::ordered_json::array();
  std::vector<std::pair<std::string, std::string>> turns;
};

/// Reads messages {"role": user|assistant|system|tool, "content"} (transformers, TRL) or
/// {"from": human|assistant, "content"} (ColossalChat). Returns the problem, or "" when fine.
std::string read_messages(const nlohmann::json& array, Conversation& out);

/// A conversation's tokens and, per token, 1 on the assistant replies from the
/// `first_reply`-th on (counting from 0): the tokenizer's own template (chat_template "auto" and
/// the tokenizer has one, via template_segments) or a built-in one by name (BOS before each human
/// turn, EOS after each reply).
struct TokenizedConversation {
  std::vector<int64_t> ids;
  std::vector<uint8_t> mask;
};
TokenizedConversation tokenize_conversation(const text::Tokenizer& tokenizer, const Conversation& conversation,
                                            const std::string& chat_template, size_t first_reply = 0);

/// The chat template by name ("llama2"): the text of `messages` and, per character range, whether
/// it is an assistant reply. Throws listing the known names.
struct ChatSegment {
  std::string text;
  bool assistant = false;
};
std::vector<ChatSegment> apply_chat_template(const std::string& name,
                                             const std::vector<std::pair<std::string, std::string>>& messages);

/// A conversation ({"role", "content"} messages) through a tokenizer's own chat template, cut
/// into what the model reads (assistant = false) and each reply it learns (assistant = true):
/// the template rendered up to each reply with the generation prompt, then with the reply. A
/// template that does not render conversations prefix by prefix is an error that says so.
std::vector<ChatSegment> template_segments(const text::Tokenizer& tokenizer, const nlohmann::ordered_json& messages);

}  // namespace colossal::llama
