#include "llama/prompt_data.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/common/check.h"
#include "core/common/log.h"

namespace colossal::llama {
namespace {

using json = nlohmann::json;

// Reads one row into `p`; returns the problem ("" when fine).
std::string read_prompt(const json& js, const PromptDataOptions& o, const text::Tokenizer& tok, Prompt& p) {
  if (!js.is_object() || !js.contains("prompt"))
    return "expected {\"prompt\": text or messages, \"answer\": text}";
  if (js.contains("answer")) {
    if (!js["answer"].is_string()) return "\"answer\" must be a string";
    p.answer = js["answer"].get<std::string>();
  }
  Conversation conv;
  if (js["prompt"].is_string()) {
    p.text = js["prompt"].get<std::string>();
    if (p.text.find_first_not_of(" \t\r\n") == std::string::npos) return "empty prompt";
    conv.roles.push_back({{"role", "user"}, {"content", p.text}});
    conv.turns.push_back({"human", p.text});
  } else {
    auto problem = read_messages(js["prompt"], conv);
    if (!problem.empty()) return "prompt: " + problem;
    if (conv.turns.empty() || conv.turns.back().first != "human")
      return "prompt: the conversation must end with a user message";
    p.text = conv.turns.back().second;
  }
  // An empty reply marks where the assistant's turn begins: the prompt is everything before it.
  const auto earlier = static_cast<size_t>(std::count_if(conv.turns.begin(), conv.turns.end(),
                                                         [](const auto& t) { return t.first == "assistant"; }));
  conv.roles.push_back({{"role", "assistant"}, {"content", ""}});
  conv.turns.push_back({"assistant", ""});
  const auto rendered = tokenize_conversation(tok, conv, o.chat_template, earlier);
  const auto reply = std::find(rendered.mask.begin(), rendered.mask.end(), 1);
  p.ids.assign(rendered.ids.begin(), rendered.ids.begin() + (reply - rendered.mask.begin()));
  if (p.ids.empty()) return "the prompt renders to no token";
  if (static_cast<int64_t>(p.ids.size()) + o.completion_tokens > o.max_length)
    return c10::str("the prompt takes ", p.ids.size(), " tokens, leaving no room for ", o.completion_tokens,
                    " completion tokens within max_length ", o.max_length);
  return "";
}

}  // namespace

void PromptDataOptions::validate() const {
  COLOSSAL_CHECK(!files.empty(), "[data] no prompt files");
  COLOSSAL_CHECK(on_bad_line == "stop" || on_bad_line == "skip", "[data] on_bad_line: expected stop or skip, got '",
                 on_bad_line, "'");
  COLOSSAL_CHECK(completion_tokens >= 1 && max_length > completion_tokens, "[data] max_length ", max_length,
                 " must exceed the completion's ", completion_tokens, " tokens");
}

PromptDataset PromptDataset::open(const PromptDataOptions& o, const text::Tokenizer& tok) {
  o.validate();
  PromptDataset d;
  for (const auto& f : o.files) {
    std::ifstream in(f);
    COLOSSAL_CHECK(in.good(), "[data] cannot read prompt file '", f, "'");
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      Prompt p;
      auto js = json::parse(line, nullptr, false);
      const std::string problem = js.is_discarded() ? "not valid JSON" : read_prompt(js, o, tok, p);
      if (problem.empty()) {
        p.where = f + ":" + std::to_string(n);
        d.prompts_.push_back(std::move(p));
        continue;
      }
      COLOSSAL_CHECK(o.on_bad_line == "skip", "[data] '", f, "' line ", n, ": ", problem,
                     " (on_bad_line=skip skips such lines)");
      if (d.skipped_++ < 5) COLOSSAL_LOG_WARN("[data] '", f, "' line ", n, ": ", problem, " (skipped)");
    }
  }
  COLOSSAL_CHECK(!d.prompts_.empty(), "[data] ", o.files.front(), o.files.size() > 1 ? " and the others" : "",
                 ": no usable prompt");
  return d;
}

const Prompt& PromptDataset::prompt(int64_t i) const {
  COLOSSAL_CHECK(i >= 0 && i < size(), "[data] prompt ", i, " is outside [0, ", size(), ")");
  return prompts_[static_cast<size_t>(i)];
}

double PromptDataset::mean_prompt_tokens() const {
  double total = 0;
  for (const auto& p : prompts_) total += static_cast<double>(p.ids.size());
  return prompts_.empty() ? 0 : total / static_cast<double>(prompts_.size());
}

}  // namespace colossal::llama
