#include "llama/preference_data.h"

#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/common/check.h"
#include "core/common/log.h"

namespace colossal::llama {
namespace {

using json = nlohmann::json;

bool blank(const std::string& s) { return s.find_first_not_of(" \t\r\n") == std::string::npos; }

// The number of assistant messages among `messages` and whether any has text.
std::pair<size_t, bool> replies(const Conversation& c) {
  size_t n = 0;
  bool text = false;
  for (const auto& [who, content] : c.turns)
    if (who == "assistant") {
      ++n;
      text = text || !blank(content);
    }
  return {n, text};
}

// Reads one line into `pair`; returns the problem ("" when fine).
std::string read_pair(const json& js, const PreferenceDataOptions& o, const text::Tokenizer& tok,
                      PreferencePair& pair) {
  if (!js.is_object()) return "not a JSON object";
  const char* prompt_key = js.contains("prompt") ? "prompt" : js.contains("context") ? "context" : nullptr;
  for (const char* k : {"chosen", "rejected"})
    if (!js.contains(k)) return std::string("expected \"") + k + "\" (and \"prompt\", unless the conversations share it)";
  if (js["chosen"].is_string() || (prompt_key && js[prompt_key].is_string())) {
    // Standard: plain text, no template.
    if (!prompt_key || !js[prompt_key].is_string() || !js["chosen"].is_string() || !js["rejected"].is_string())
      return "expected strings \"prompt\", \"chosen\" and \"rejected\" (or message arrays for all three)";
    const auto prompt = tok.encode_with(js[prompt_key].get<std::string>(), true, false);
    for (const char* k : {"chosen", "rejected"}) {
      const auto answer = js[k].get<std::string>();
      if (blank(answer)) return std::string("empty ") + k + " answer";
      auto& seq = std::string(k) == "chosen" ? pair.chosen : pair.rejected;
      seq.ids = prompt;
      seq.mask.assign(prompt.size(), 0);
      const auto ids = tok.encode_with(answer, false, true);
      seq.ids.insert(seq.ids.end(), ids.begin(), ids.end());
      seq.mask.insert(seq.mask.end(), ids.size(), 1);
    }
    return "";
  }
  // Conversational.
  Conversation prompt, chosen, rejected;
  std::string problem;
  if (prompt_key && (problem = read_messages(js[prompt_key], prompt)) != "") return std::string(prompt_key) + ": " + problem;
  if ((problem = read_messages(js["chosen"], chosen)) != "") return "chosen: " + problem;
  if ((problem = read_messages(js["rejected"], rejected)) != "") return "rejected: " + problem;
  if (!prompt_key) {  // implicit prompt: the messages both conversations start with
    size_t common = 0;
    while (common < chosen.roles.size() && common < rejected.roles.size() &&
           chosen.roles[common] == rejected.roles[common])
      ++common;
    if (common == 0) return "no \"prompt\", and the chosen and rejected conversations share no first message";
    // The messages [begin, end) of a conversation (already normalised: they read back unchanged).
    auto sub = [](const Conversation& whole, size_t begin, size_t end) {
      Conversation part;
      read_messages(json::parse(nlohmann::ordered_json(whole.roles.begin() + static_cast<std::ptrdiff_t>(begin),
                                                       whole.roles.begin() + static_cast<std::ptrdiff_t>(end))
                                    .dump()),
                    part);
      return part;
    };
    prompt = sub(chosen, 0, common);
    chosen = sub(chosen, common, chosen.roles.size());
    rejected = sub(rejected, common, rejected.roles.size());
  }
  const size_t prompt_replies = replies(prompt).first;
  for (auto* k : {"chosen", "rejected"}) {
    const bool is_chosen = std::string(k) == "chosen";
    const Conversation& answer = is_chosen ? chosen : rejected;
    if (!replies(answer).second) return std::string("empty ") + k + " answer (no assistant message with text)";
    Conversation whole = prompt;
    for (const auto& m : answer.roles) whole.roles.push_back(m);
    whole.turns.insert(whole.turns.end(), answer.turns.begin(), answer.turns.end());
    auto t = tokenize_conversation(tok, whole, o.chat_template, prompt_replies);
    auto& seq = is_chosen ? pair.chosen : pair.rejected;
    seq.ids = std::move(t.ids);
    seq.mask = std::move(t.mask);
  }
  return "";
}

}  // namespace

void PreferenceDataOptions::validate() const {
  COLOSSAL_CHECK(!files.empty(), "[data] no preference files");
  COLOSSAL_CHECK(on_bad_line == "stop" || on_bad_line == "skip", "[data] on_bad_line: expected stop or skip, got '",
                 on_bad_line, "'");
  COLOSSAL_CHECK(max_length >= 2, "[data] max_length must be >= 2, got ", max_length);
}

PreferenceDataset PreferenceDataset::open(const PreferenceDataOptions& o, const text::Tokenizer& tok) {
  o.validate();
  PreferenceDataset d;
  d.pad_id_ = tok.pad_id() >= 0 ? tok.pad_id() : tok.eos_id();
  for (const auto& f : o.files) {
    std::ifstream in(f);
    COLOSSAL_CHECK(in.good(), "[data] cannot read preference file '", f, "'");
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (blank(line)) continue;
      PreferencePair pair;
      auto js = json::parse(line, nullptr, false);
      std::string problem = js.is_discarded() ? "not valid JSON" : read_pair(js, o, tok, pair);
      bool cut = false;
      for (auto* seq : {&pair.chosen, &pair.rejected}) {
        if (!problem.empty()) break;
        const auto first = std::find(seq->mask.begin(), seq->mask.end(), 1);
        const auto prompt = static_cast<int64_t>(first - seq->mask.begin());
        if (first == seq->mask.end()) {
          problem = "the answer has no token";
        } else if (prompt >= o.max_length) {
          problem = c10::str("the prompt takes ", prompt, " tokens, leaving no answer token within max_length ",
                             o.max_length);
        } else if (prompt == 0) {
          problem = "the answer starts the sequence: nothing predicts its first token";
        } else if (static_cast<int64_t>(seq->ids.size()) > o.max_length) {
          seq->ids.resize(static_cast<size_t>(o.max_length));
          seq->mask.resize(static_cast<size_t>(o.max_length));
          cut = true;
        }
      }
      if (problem.empty()) {
        d.truncated_ += cut ? 1 : 0;
        d.pairs_.push_back(std::move(pair));
        continue;
      }
      COLOSSAL_CHECK(o.on_bad_line == "skip", "[data] '", f, "' line ", n, ": ", problem,
                     " (on_bad_line=skip skips such lines)");
      if (d.skipped_++ < 5) COLOSSAL_LOG_WARN("[data] '", f, "' line ", n, ": ", problem, " (skipped)");
    }
  }
  if (d.truncated_ > 0)
    COLOSSAL_LOG_WARN("[data] ", d.truncated_, " of ", d.pairs_.size(), " pairs have an answer cut at max_length ",
                      o.max_length);
  COLOSSAL_CHECK(!d.pairs_.empty(), "[data] ", o.files.front(), o.files.size() > 1 ? " and the others" : "",
                 ": no usable preference pair");
  return d;
}

const PreferencePair& PreferenceDataset::pair(int64_t i) const {
  COLOSSAL_CHECK(i >= 0 && i < size(), "[data] pair ", i, " is outside [0, ", size(), ")");
  return pairs_[static_cast<size_t>(i)];
}

double PreferenceDataset::mean_pair_tokens() const {
  double total = 0;
  for (const auto& p : pairs_) total += static_cast<double>(p.chosen.ids.size() + p.rejected.ids.size());
  return total / static_cast<double>(pairs_.size());
}

Batch PreferenceDataset::batch(const std::vector<int64_t>& indices, int64_t multiple) const {
  COLOSSAL_CHECK(multiple >= 1, "[data] multiple must be >= 1");
  const int64_t B = static_cast<int64_t>(indices.size());
  std::vector<const ScoredSequence*> rows;
  for (int64_t i : indices) rows.push_back(&pair(i).chosen);
  for (int64_t i : indices) rows.push_back(&pair(i).rejected);
  size_t longest = 0;
  for (const auto* r : rows) longest = std::max(longest, r->ids.size());
  const int64_t T = (static_cast<int64_t>(longest) + multiple - 1) / multiple * multiple;
  auto ids = torch::full({2 * B, T}, pad_id_, torch::kInt64);
  auto labels = torch::full({2 * B, T}, -100, torch::kInt64);
  auto* ip = ids.data_ptr<int64_t>();
  auto* lp = labels.data_ptr<int64_t>();
  for (size_t r = 0; r < rows.size(); ++r)
    for (size_t t = 0; t < rows[r]->ids.size(); ++t) {
      ip[static_cast<int64_t>(r) * T + static_cast<int64_t>(t)] = rows[r]->ids[t];
      if (rows[r]->mask[t]) lp[static_cast<int64_t>(r) * T + static_cast<int64_t>(t)] = rows[r]->ids[t];
    }
  return {ids, labels};
}

}  // namespace colossal::llama
