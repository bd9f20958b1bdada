// The built-in verifiable tasks: every answer is right by its own definition, the kinds alternate,
// a seed gives the same tasks, and the rewards score what they say they score.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "llama/chat_tasks.h"

namespace colossal::llama {
namespace {

TEST(ChatTasks, AnswersAreRightAndKindsAlternate) {
  const std::vector<std::string> words = {"manor", "cat", "ball"};
  const auto tasks = make_chat_tasks(400, 7, words);
  ASSERT_EQ(tasks.size(), 400u);
  int one_digit = 0;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const auto& t = tasks[i];
    if (i % 2 == 0) {
      long a = -1, b = -1;
      ASSERT_EQ(std::sscanf(t.prompt.c_str(), "What is %ld + %ld?", &a, &b), 2) << t.prompt;
      EXPECT_TRUE(a >= 0 && a < 100 && b >= 0 && b < 100) << t.prompt;
      EXPECT_EQ(t.answer, std::to_string(a + b)) << t.prompt;
      one_digit += a < 10;
    } else {
      const std::string prefix = "Reverse the letters: ";
      ASSERT_EQ(t.prompt.rfind(prefix, 0), 0u) << t.prompt;
      std::string word, reversed;  // the spaced letters, joined
      for (char c : t.prompt.substr(prefix.size())) if (c != ' ') word += c;
      for (char c : t.answer) if (c != ' ') reversed += c;
      EXPECT_NE(std::find(words.begin(), words.end(), word), words.end()) << t.prompt;
      EXPECT_EQ(reversed, std::string(word.rbegin(), word.rend())) << t.prompt;
      EXPECT_EQ(t.answer.size(), 2 * word.size() - 1) << "one space between letters: '" << t.answer << "'";
    }
  }
  EXPECT_GT(one_digit, 60);  // operands of 1 or 2 digits, about equally often
  EXPECT_LT(one_digit, 140);
  const auto again = make_chat_tasks(400, 7, words);
  const auto other = make_chat_tasks(400, 8, words);
  EXPECT_EQ(again[10].prompt, tasks[10].prompt);
  int same = 0;
  for (size_t i = 0; i < tasks.size(); ++i) same += other[i].prompt == tasks[i].prompt;
  EXPECT_LT(same, 100);
  for (const auto& t : make_chat_tasks(10, 1, {})) EXPECT_EQ(t.prompt.rfind("What is ", 0), 0u) << t.prompt;
}

TEST(ChatTasks, RewardsScoreTheFirstLine) {
  EXPECT_EQ(exact_match_reward("  132 \nand more", "132"), 1.0);
  EXPECT_EQ(exact_match_reward("1320", "132"), 0.0);
  EXPECT_EQ(exact_match_reward("", "132"), 0.0);
  EXPECT_EQ(partial_match_reward("r o n a m", "r o n a m"), 1.0);
  EXPECT_DOUBLE_EQ(partial_match_reward("122", "132"), 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(partial_match_reward("13", "132"), 2.0 / 3.0);    // over the longer
  EXPECT_DOUBLE_EQ(partial_match_reward("1324", "132"), 3.0 / 4.0);
  EXPECT_EQ(partial_match_reward("\n132", "132"), 0.0);              // only the first line counts
}

TEST(ChatTasks, ReversalTasksAreTheReversalsOfTheSameDraws) {
  const std::vector<std::string> words = {"manor", "cat", "ball"};
  const auto all = make_chat_tasks(40, 3, words);
  const auto reversals = make_reversal_tasks(20, 3, words);
  ASSERT_EQ(reversals.size(), 20u);
  for (size_t k = 0; k < reversals.size(); ++k) {
    EXPECT_EQ(reversals[k].prompt, all[2 * k + 1].prompt);
    EXPECT_EQ(reversals[k].prompt.rfind("Reverse the letters: ", 0), 0u) << reversals[k].prompt;
    EXPECT_EQ(reversals[k].answer, all[2 * k + 1].answer);
  }
}

}  // namespace
}  // namespace colossal::llama
