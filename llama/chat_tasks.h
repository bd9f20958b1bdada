#pragma once
// Built-in verifiable chat tasks: the default data of --mode sft (conversations) and the prompts
// and answers a reinforcement-learning run is rewarded against. Two kinds, in turn:
//   add      "What is 47 + 85?"          -> "132"    (operands of 1 or 2 digits)
//   reverse  "Reverse the letters: m a n o r"  -> "r o n a m"  (words of 3 to 5 letters from a text)
// The letters are spaced so that each is one token whatever the tokenizer merges: reversing is
// then copying tokens in reverse order, which a small model learns, where reversing a word
// tokenized as one piece would need the spelling of every piece. Small enough that a
// few-million-parameter model fine-tuned for minutes answers some of them right (about half of
// the reversals; the additions seldom), which is what reinforcement learning needs to start from.
// Each answer is checkable by exact match, so a model's success rate is a reward.
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::llama {

struct ChatTask {
  std::string prompt, answer;
};

/// `count` tasks drawn from `seed`, alternating addition and reversal (reversal needs `words`;
/// without them every task is an addition).
std::vector<ChatTask> make_chat_tasks(int64_t count, uint64_t seed, const std::vector<std::string>& words);

/// The reversals among make_chat_tasks(2 * count, seed, words): `count` of them, the same draws.
std::vector<ChatTask> make_reversal_tasks(int64_t count, uint64_t seed, const std::vector<std::string>& words);

/// The distinct lower-case alphabetic words of `min_letters` to `max_letters` letters in a
/// {"text"} JSONL file, in order of first appearance, at most `limit`.
std::vector<std::string> words_of(const std::string& text_jsonl, size_t min_letters = 3, size_t max_letters = 5,
                                  size_t limit = 2000);

/// 1 when the completion, cut at its first line break and trimmed of spaces, is the answer; else 0.
double exact_match_reward(const std::string& completion, const std::string& answer);

/// Partial credit: the share of positions where the completion's first line (trimmed) and the
/// answer hold the same character, over the longer of the two; 1 exactly when exact_match_reward is.
double partial_match_reward(const std::string& completion, const std::string& answer);

/// JSONL, one task per line: {"messages": [{"role": "user", ...}, {"role": "assistant", ...}]}
/// (as_messages: SFT's conversations) or {"prompt", "answer"} (the RL prompts). Atomic.
void write_chat_tasks(const std::vector<ChatTask>& tasks, const std::string& path, bool as_messages);

}  // namespace colossal::llama
