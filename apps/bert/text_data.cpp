#include "apps/bert/text_data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/common/check.h"
#include "llama/corpus.h"

namespace colossal::bert_app {
namespace {

// "PRIDE AND PREJUDICE" -> "Pride and Prejudice".
std::string title_case(const std::string& upper) {
  std::string out;
  std::istringstream words(upper);
  std::string w;
  while (words >> w) {
    std::string lower;
    for (unsigned char ch : w) lower.push_back(static_cast<char>(std::tolower(ch)));
    if (!out.empty() && (lower == "and" || lower == "of" || lower == "the")) {
      out += " " + lower;
      continue;
    }
    lower[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(lower[0])));
    out += (out.empty() ? "" : " ") + lower;
  }
  return out;
}

bool is_heading(const std::string& line) {  // "CHAPTER 12", "VOLUME II": no lowercase letter
  bool letters = false;
  for (unsigned char ch : line) {
    if (std::islower(ch)) return false;
    letters = letters || std::isupper(ch);
  }
  return letters;
}

// BERT's uncased basic tokenization for the vocabulary: ASCII lowercased, split at whitespace,
// each punctuation character a word of its own (what BertPreTokenizer does).
std::vector<std::string> basic_words(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(cur);
    cur.clear();
  };
  for (unsigned char ch : text) {
    if (std::isspace(ch)) {
      flush();
    } else if (ch < 128 && std::ispunct(ch)) {
      flush();
      out.emplace_back(1, static_cast<char>(ch));
    } else {
      cur.push_back(static_cast<char>(ch < 128 ? std::tolower(ch) : ch));
    }
  }
  flush();
  return out;
}

// The UTF-8 characters of a word.
std::vector<std::string> characters(const std::string& w) {
  std::vector<std::string> out;
  for (size_t i = 0; i < w.size();) {
    const auto c = static_cast<unsigned char>(w[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    out.push_back(w.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

TextData austen_passages(const std::string& rdb_path, int64_t words, int64_t held_out_every) {
  COLOSSAL_CHECK(words >= 8 && held_out_every >= 2, "[data] passages need >= 8 words and held_out_every >= 2");
  auto novels = llama::read_r_character_vectors(rdb_path);
  COLOSSAL_CHECK(novels.size() >= 2, "[data] '", rdb_path, "' holds ", novels.size(),
                 " texts; the Austen task needs the six novels (scripts/setup.sh fetches them)");
  TextData out;
  // The package stores the novels by name; each begins with its title line.
  std::vector<std::pair<std::string, const std::vector<std::string>*>> titled;
  for (const auto& lines : novels) {
    auto first = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
      return l.find_first_not_of(" \t") != std::string::npos;
    });
    COLOSSAL_CHECK(first != lines.end(), "[data] '", rdb_path, "': a novel with no text");
    titled.push_back({title_case(*first), &lines});
  }
  std::sort(titled.begin(), titled.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t label = 0; label < titled.size(); ++label) {
    out.class_names.push_back(titled[label].first);
    std::vector<std::string> passage_words;
    int64_t passage = 0;
    bool title = true;
    for (const auto& line : *titled[label].second) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      if (title || is_heading(line)) {  // the title, chapter and volume headings say nothing of the style
        title = false;
        continue;
      }
      std::istringstream in(line);
      std::string w;
      while (in >> w) {
        passage_words.push_back(w);
        if (static_cast<int64_t>(passage_words.size()) < words) continue;
        std::string text;
        for (const auto& x : passage_words) text += (text.empty() ? "" : " ") + x;
        auto& split = ++passage % held_out_every == 0 ? out.eval : out.train;
        split.texts.push_back(std::move(text));
        split.labels.push_back(static_cast<int64_t>(label));
        passage_words.clear();
      }
    }
  }
  std::ostringstream d;
  d << "Jane Austen's novels (r-cran-janeaustenr): " << out.train.texts.size() << " training and "
    << out.eval.texts.size() << " held-out passages of " << words << " words, labelled by novel (";
  for (size_t i = 0; i < out.class_names.size(); ++i) d << (i ? ", " : "") << out.class_names[i];
  d << ")";
  out.description = d.str();
  return out;
}

LabelledTexts read_jsonl(const std::string& path, bool labelled, std::vector<std::string>& class_names) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[data] cannot read '", path, "'");
  LabelledTexts out;
  std::vector<nlohmann::json> raw_labels;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const std::exception& e) {
      COLOSSAL_FAIL("[data] ", path, ":", number, ": not valid JSON: ", e.what());
    }
    COLOSSAL_CHECK(j.is_object() && j.contains("text") && j["text"].is_string(), "[data] ", path, ":", number,
                   ": expected an object with a string \"text\"");
    out.texts.push_back(j["text"].get<std::string>());
    if (labelled) {
      COLOSSAL_CHECK(j.contains("label") && (j["label"].is_string() || j["label"].is_number_integer()), "[data] ",
                     path, ":", number, ": expected a \"label\" (a class name or an integer), found ",
                     j.contains("label") ? j["label"].dump() : std::string("none"));
      raw_labels.push_back(j["label"]);
    }
  }
  COLOSSAL_CHECK(!out.texts.empty(), "[data] '", path, "' holds no texts");
  if (!labelled) {
    out.labels.assign(out.texts.size(), -1);
    return out;
  }
  if (class_names.empty()) {  // names in sorted order (integers as their decimal text, in numeric order)
    std::set<std::string> names;
    std::set<int64_t> ids;
    for (const auto& l : raw_labels) l.is_string() ? (void)names.insert(l.get<std::string>()) : (void)ids.insert(l.get<int64_t>());
    COLOSSAL_CHECK(names.empty() || ids.empty(), "[data] '", path, "': labels mix names and integers");
    if (!ids.empty()) {
      COLOSSAL_CHECK(*ids.begin() >= 0, "[data] '", path, "': label ", *ids.begin(), " is negative");
      for (int64_t i = 0; i <= *ids.rbegin(); ++i) class_names.push_back(std::to_string(i));
    } else {
      class_names.assign(names.begin(), names.end());
    }
  }
  std::map<std::string, int64_t> index;
  for (size_t i = 0; i < class_names.size(); ++i) index[class_names[i]] = static_cast<int64_t>(i);
  for (size_t k = 0; k < raw_labels.size(); ++k) {
    const auto& l = raw_labels[k];
    const std::string name = l.is_string() ? l.get<std::string>() : std::to_string(l.get<int64_t>());
    auto it = index.find(name);
    COLOSSAL_CHECK(it != index.end(), "[data] '", path, "': label \"", name, "\" of text ", k + 1,
                   " is not one of the training labels");
    out.labels.push_back(it->second);
  }
  return out;
}

void hold_out(LabelledTexts& all, LabelledTexts& eval, int64_t held_out_every) {
  LabelledTexts kept;
  for (size_t i = 0; i < all.texts.size(); ++i) {
    auto& to = (static_cast<int64_t>(i) + 1) % held_out_every == 0 ? eval : kept;
    to.texts.push_back(std::move(all.texts[i]));
    to.labels.push_back(all.labels[i]);
  }
  all = std::move(kept);
}

std::map<std::string, std::string> learn_wordpiece(const std::vector<std::string>& texts, int64_t vocab_size) {
  std::map<std::string, int64_t> counts;
  std::set<std::string> chars;
  for (const auto& t : texts)
    for (const auto& w : basic_words(t)) {
      ++counts[w];
      for (const auto& c : characters(w)) chars.insert(c);
    }
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const auto& c : chars) vocab.push_back(c);
  for (const auto& c : chars) vocab.push_back("##" + c);
  std::vector<std::pair<int64_t, std::string>> by_count;
  for (const auto& [w, n] : counts)
    if (characters(w).size() > 1) by_count.push_back({-n, w});
  std::sort(by_count.begin(), by_count.end());
  for (const auto& [n, w] : by_count) {
    if (static_cast<int64_t>(vocab.size()) >= vocab_size) break;
    vocab.push_back(w);
  }
  nlohmann::ordered_json v = nlohmann::ordered_json::object(), added = nlohmann::ordered_json::array();
  std::string vocab_txt;
  for (size_t i = 0; i < vocab.size(); ++i) {
    v[vocab[i]] = i;
    vocab_txt += vocab[i] + "\n";
    if (i < 5)
      added.push_back({{"id", i}, {"content", vocab[i]}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
  }
  auto special = [](const char* name, int id) {
    return nlohmann::ordered_json{{"id", name}, {"ids", {id}}, {"tokens", {name}}};
  };
  nlohmann::ordered_json j;
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added;
  j["normalizer"] = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                     {"strip_accents", nullptr}, {"lowercase", true}};
  j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}},
      {"pair", {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "B"}, {"type_id", 1}}}},
                {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 1}}}}}},
      {"special_tokens", {{"[CLS]", special("[CLS]", 2)}, {"[SEP]", special("[SEP]", 3)}}}};
  j["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  j["model"] = {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                {"max_input_chars_per_word", 100}, {"vocab", v}};
  nlohmann::ordered_json config = {{"tokenizer_class", "BertTokenizer"}, {"do_lower_case", true},
                                   {"unk_token", "[UNK]"}, {"sep_token", "[SEP]"}, {"pad_token", "[PAD]"},
                                   {"cls_token", "[CLS]"}, {"mask_token", "[MASK]"}, {"model_max_length", 512}};
  return {{"tokenizer.json", j.dump(2) + "\n"}, {"tokenizer_config.json", config.dump(2) + "\n"},
          {"vocab.txt", vocab_txt}};
}

TextBatch make_batch(const text::Tokenizer& tok, const LabelledTexts& data, const std::vector<int64_t>& idx,
                     int64_t max_length) {
  std::vector<std::vector<int64_t>> rows;
  size_t longest = 1;
  for (int64_t i : idx) {
    auto ids = tok.encode(data.texts.at(static_cast<size_t>(i)), /*add_special_tokens=*/true);
    if (static_cast<int64_t>(ids.size()) > max_length) {  // truncated, the closing [SEP] kept
      const int64_t last = ids.back();
      ids.resize(static_cast<size_t>(max_length));
      ids.back() = last;
    }
    longest = std::max(longest, ids.size());
    rows.push_back(std::move(ids));
  }
  const int64_t B = static_cast<int64_t>(idx.size()), N = static_cast<int64_t>(longest);
  const int64_t pad = std::max<int64_t>(0, tok.pad_id());
  TextBatch b;
  b.input_ids = torch::full({B, N}, pad, torch::kLong);
  b.attention_mask = torch::zeros({B, N}, torch::kLong);
  b.token_type_ids = torch::zeros({B, N}, torch::kLong);
  b.labels = torch::empty({B}, torch::kLong);
  for (int64_t r = 0; r < B; ++r) {
    const auto& ids = rows[static_cast<size_t>(r)];
    const int64_t n = static_cast<int64_t>(ids.size());
    b.input_ids[r].narrow(0, 0, n).copy_(torch::tensor(ids, torch::kLong));
    b.attention_mask[r].narrow(0, 0, n).fill_(1);
    b.labels[r] = data.labels.at(static_cast<size_t>(idx[static_cast<size_t>(r)]));
  }
  return b;
}

void mask_tokens(TextBatch& b, const std::vector<int64_t>& idx, uint64_t seed, int64_t epoch, int64_t mask_id,
                 int64_t vocab_size, const text::Tokenizer& tok, double probability) {
  const int64_t B = b.input_ids.size(0), N = b.input_ids.size(1);
  auto labels = torch::full({B, N}, -100, torch::kLong);
  auto ids = b.input_ids.accessor<int64_t, 2>();
  auto mask = b.attention_mask.accessor<int64_t, 2>();
  auto out = labels.accessor<int64_t, 2>();
  for (int64_t r = 0; r < B; ++r) {
    const uint64_t sample = static_cast<uint64_t>(idx[static_cast<size_t>(r)]);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ULL + static_cast<uint64_t>(epoch) * 7919ULL +
                                                        sample * 2654435761ULL);
    // Three draws per position, in position order: a token's draws do not depend on how long
    // the batch it sits in is padded.
    auto draws = torch::rand({N, 3}, gen);
    auto d = draws.accessor<float, 2>();
    for (int64_t t = 0; t < N; ++t) {
      if (!mask[r][t] || tok.is_special(ids[r][t]) || d[t][0] >= probability) continue;
      out[r][t] = ids[r][t];
      const float how = d[t][1];
      if (how < 0.8f) ids[r][t] = mask_id;
      else if (how < 0.9f)
        ids[r][t] = std::min<int64_t>(vocab_size - 1, static_cast<int64_t>(d[t][2] * static_cast<float>(vocab_size)));
    }
  }
  b.labels = labels;
}

}  // namespace colossal::bert_app
