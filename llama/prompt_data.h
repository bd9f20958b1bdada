#pragma once
// Prompts for reinforcement learning, with the answer a reward checks them against, read from
// JSONL as TRL's GRPOTrainer and ColossalChat's GRPO write them:
//   {"prompt": "text", "answer": "..."}                     one user message
//   {"prompt": [{"role", "content"}, ...], "answer": "..."}  a conversation so far
// ("answer" may be left out where the reward does not need one). Each prompt is rendered through
// the chat template (the tokenizer's own, else --chat_template) up to where the assistant's reply
// begins, as the model saw replies in fine-tuning. A line that is not such a row, or a prompt that
// leaves no room for a completion within max_length, is named by file and line (on_bad_line =
// skip counts and skips it).
#include <cstdint>
#include <string>
#include <vector>

#include "llama/dataset.h"

namespace colossal::llama {

struct PromptDataOptions {
  std::vector<std::string> files;
  std::string chat_template = "auto";
  std::string on_bad_line = "stop";  // stop | skip
  int64_t max_length = 512;          // prompt + completion tokens
  int64_t completion_tokens = 32;    // room each prompt must leave
  void validate() const;
};

struct Prompt {
  std::vector<int64_t> ids;  // rendered, ending where the reply begins
  std::string text;          // the last user message (what a reward function is shown)
  std::string answer;
  std::string where;         // "file:line", for errors about this prompt
};

class PromptDataset {
 public:
  static PromptDataset open(const PromptDataOptions& options, const text::Tokenizer& tokenizer);
  int64_t size() const { return static_cast<int64_t>(prompts_.size()); }
  const Prompt& prompt(int64_t i) const;
  int64_t skipped_lines() const { return skipped_; }
  double mean_prompt_tokens() const;

 private:
  std::vector<Prompt> prompts_;
  int64_t skipped_ = 0;
};

}  // namespace colossal::llama
