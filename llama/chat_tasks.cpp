#include "llama/chat_tasks.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"

namespace colossal::llama {
namespace {

template <class It>
std::string spaced(It begin, It end) {  // "abc" -> "a b c"
  std::string out;
  for (It c = begin; c != end; ++c) {
    if (!out.empty()) out += ' ';
    out += *c;
  }
  return out;
}

}  // namespace

std::vector<ChatTask> make_chat_tasks(int64_t count, uint64_t seed, const std::vector<std::string>& words) {
  COLOSSAL_CHECK(count >= 0, "[tasks] count must be >= 0, got ", count);
  std::mt19937_64 rng(seed);
  auto operand = [&] {  // 1 or 2 digits, equally often
    return rng() % 2 ? static_cast<int64_t>(rng() % 10) : 10 + static_cast<int64_t>(rng() % 90);
  };
  std::vector<ChatTask> tasks;
  tasks.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    if (i % 2 == 1 && !words.empty()) {
      const auto& w = words[rng() % words.size()];
      tasks.push_back({"Reverse the letters: " + spaced(w.begin(), w.end()), spaced(w.rbegin(), w.rend())});
    } else {
      const int64_t a = operand(), b = operand();
      tasks.push_back({"What is " + std::to_string(a) + " + " + std::to_string(b) + "?", std::to_string(a + b)});
    }
  }
  return tasks;
}

std::vector<ChatTask> make_reversal_tasks(int64_t count, uint64_t seed, const std::vector<std::string>& words) {
  COLOSSAL_CHECK(!words.empty(), "[tasks] reversals need words");
  std::vector<ChatTask> out;
  const auto all = make_chat_tasks(2 * count, seed, words);
  for (size_t i = 1; i < all.size(); i += 2) out.push_back(all[i]);  // the kinds alternate: odd ones reverse
  return out;
}

std::vector<std::string> words_of(const std::string& text_jsonl, size_t min_letters, size_t max_letters,
                                  size_t limit) {
  std::ifstream in(text_jsonl);
  COLOSSAL_CHECK(in.good(), "[tasks] cannot read '", text_jsonl, "'");
  std::vector<std::string> out;
  std::set<std::string> seen;
  std::string line;
  while (out.size() < limit && std::getline(in, line)) {
    auto js = nlohmann::json::parse(line, nullptr, false);
    if (js.is_discarded() || !js.contains("text") || !js["text"].is_string()) continue;
    std::istringstream text(js["text"].get<std::string>());
    for (std::string w; out.size() < limit && text >> w;) {
      const bool lower = std::all_of(w.begin(), w.end(), [](unsigned char c) { return c >= 'a' && c <= 'z'; });
      if (lower && w.size() >= min_letters && w.size() <= max_letters && seen.insert(w).second) out.push_back(w);
    }
  }
  return out;
}

namespace {

std::string first_line_trimmed(const std::string& completion) {
  std::string first = completion.substr(0, completion.find('\n'));
  const auto begin = first.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return first.substr(begin, first.find_last_not_of(" \t\r") - begin + 1);
}

}  // namespace

double exact_match_reward(const std::string& completion, const std::string& answer) {
  return first_line_trimmed(completion) == answer ? 1.0 : 0.0;
}

double partial_match_reward(const std::string& completion, const std::string& answer) {
  const std::string got = first_line_trimmed(completion);
  const size_t longer = std::max(got.size(), answer.size());
  if (longer == 0) return 1.0;
  size_t same = 0;
  for (size_t i = 0; i < std::min(got.size(), answer.size()); ++i) same += got[i] == answer[i] ? 1 : 0;
  return static_cast<double>(same) / static_cast<double>(longer);
}

void write_chat_tasks(const std::vector<ChatTask>& tasks, const std::string& path, bool as_messages) {
  std::ostringstream out;
  for (const auto& t : tasks) {
    nlohmann::ordered_json row;
    if (as_messages) {
      row["messages"] = {{{"role", "user"}, {"content", t.prompt}}, {{"role", "assistant"}, {"content", t.answer}}};
    } else {
      row["prompt"] = t.prompt;
      row["answer"] = t.answer;
    }
    out << row.dump() << "\n";
  }
  checkpoint::write_text_atomically(path, out.str());
}

}  // namespace colossal::llama
