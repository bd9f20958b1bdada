#pragma once
// Pairs of answers to the same prompt, one preferred (chosen) and one not (rejected), read from
// JSONL in the formats TRL and ColossalChat write:
//   standard        {"prompt": "text", "chosen": "text", "rejected": "text"}: BOS + prompt, then the
//                   answer + EOS, no template (as TRL's DPOTrainer tokenises text pairs)
//   conversational  {"prompt": [messages], "chosen": [messages], "rejected": [messages]} (TRL), or
//                   "context" for "prompt" with {"from", "content"} messages (ColossalChat); or
//                   {"chosen": [messages], "rejected": [messages]} whose common first messages are
//                   the prompt (TRL's implicit prompt). Rendered through the chat template (the
//                   tokenizer's own, else --chat_template), only the answer's replies scored.
// A pair whose prompt leaves no answer token within max_length, or whose chosen or rejected
// answer is empty, is a bad line (named by file and line; on_bad_line = skip counts and skips);
// an answer running past max_length is cut there (counted, with a warning).
#include <cstdint>
#include <string>
#include <vector>

#include "llama/dataset.h"

namespace colossal::llama {

struct PreferenceDataOptions {
  std::vector<std::string> files;
  std::string chat_template = "auto";
  std::string on_bad_line = "stop";  // stop | skip
  int64_t max_length = 512;          // tokens of prompt + answer
  void validate() const;
};

/// One tokenised sequence: prompt and answer, `mask` 1 on the answer's tokens.
struct ScoredSequence {
  std::vector<int64_t> ids;
  std::vector<uint8_t> mask;
};

struct PreferencePair {
  ScoredSequence chosen, rejected;
};

class PreferenceDataset {
 public:
  static PreferenceDataset open(const PreferenceDataOptions& options, const text::Tokenizer& tokenizer);
  int64_t size() const { return static_cast<int64_t>(pairs_.size()); }
  const PreferencePair& pair(int64_t i) const;
  int64_t skipped_lines() const { return skipped_; }
  /// What batch() pads with: the tokenizer's pad token, else its EOS (as TRL and transformers do).
  int64_t pad_id() const { return pad_id_; }
  int64_t truncated() const { return truncated_; }
  /// Mean tokens of a pair (chosen + rejected): the throughput's unit per sample.
  double mean_pair_tokens() const;
  /// Pairs `indices` as one batch of 2B sequences: rows 0..B-1 the chosen answers, B..2B-1 the
  /// rejected ones, right-padded to the longest (rounded up to a multiple of `multiple`); labels
  /// are the ids on answer tokens and -100 elsewhere.
  Batch batch(const std::vector<int64_t>& indices, int64_t multiple = 1) const;

 private:
  std::vector<PreferencePair> pairs_;
  int64_t pad_id_ = 0, skipped_ = 0, truncated_ = 0;
};

}  // namespace colossal::llama
