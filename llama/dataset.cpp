#include "llama/dataset.h"

#include "text/chat.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/integrity.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/common/log.h"

namespace colossal::llama {
namespace {

using json = nlohmann::json;

uint64_t fnv(uint64_t h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[data] cannot read '", path, "'");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

template <class T>
void write_binary(const std::string& path, const std::vector<T>& v) {
  checkpoint::AtomicFile f(path);
  f.write(v.data(), v.size() * sizeof(T));
  f.commit();
}

// A whole file mapped read-only (nothing for an empty file).
struct MappedFile {
  void* data = nullptr;
  size_t bytes = 0;
  explicit MappedFile(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    COLOSSAL_CHECK(fd >= 0, "[data] cannot open '", path, "'");
    struct stat st {};
    ::fstat(fd, &st);
    bytes = static_cast<size_t>(st.st_size);
    if (bytes > 0) data = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    COLOSSAL_CHECK(bytes == 0 || data != MAP_FAILED, "[data] cannot map '", path, "'");
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (data && data != MAP_FAILED) ::munmap(data, bytes);
  }
};

constexpr int kCacheVersion = 2;

// Why the cache at `base` cannot be used ("'<file>': <reason>"), or nothing when it can: the
// description must parse and be of this version, every file must have the size and CRC32C it
// recorded, the mask one byte per token, sft offsets rising to the end, every id in the vocabulary.
std::optional<std::string> cache_problem(const std::string& base, const text::Tokenizer& tok) {
  const std::string desc = base + ".json";
  auto meta = json::parse(read_file(desc), nullptr, false);
  if (meta.is_discarded() || !meta.is_object()) return "'" + desc + "' is not valid JSON";
  if (meta.value("version", 0) != kCacheVersion || !meta.contains("crc32c") || !meta["crc32c"].is_object() ||
      !meta.contains("num_tokens") || !meta["num_tokens"].is_number_unsigned()) {
    return "'" + desc + "' is from another version or lacks fields (version " + std::to_string(kCacheVersion) +
           " records num_tokens and checksums)";
  }
  const auto n = meta["num_tokens"].get<int64_t>();
  const std::pair<const char*, int64_t> expected[] = {{"tokens", n * 4}, {"mask", n}, {"docs", -1}};
  std::map<std::string, std::unique_ptr<MappedFile>> files;
  for (const auto& [part, bytes] : expected) {
    const std::string path = base + "." + part;
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return "'" + path + "' is missing";
    if (bytes >= 0 && st.st_size != bytes) {
      return c10::str("'", path, "' has ", st.st_size, " bytes, expected ", bytes, " (", n, " tokens)");
    }
    auto& file = files[part];
    file = std::make_unique<MappedFile>(path);
    const auto stored = meta["crc32c"].value(part, int64_t{-1});
    const auto computed = static_cast<int64_t>(checkpoint::crc32c(file->data, file->bytes));
    if (stored != computed) return c10::str("'", path, "' does not match its checksum (the file was changed)");
  }
  // Offsets of sft conversations: rising from 0 to the end (pretraining keeps just the 0).
  const auto& docs = *files["docs"];
  const auto* offsets = static_cast<const int64_t*>(docs.data);
  const size_t count = docs.bytes / sizeof(int64_t);
  const bool sft = meta.value("mode", "") == "sft";
  if (docs.bytes % sizeof(int64_t) != 0 || count == 0 || offsets[0] != 0 || !std::is_sorted(offsets, offsets + count) ||
      (sft ? offsets[count - 1] != n : count != 1)) {
    return "'" + base + ".docs' does not hold rising offsets from 0 to " + std::to_string(n);
  }
  const auto* ids = static_cast<const int32_t*>(files["tokens"]->data);
  if (n > 0) {
    const auto [lo, hi] = std::minmax_element(ids, ids + n);
    if (*lo < 0 || *hi >= tok.vocab_size()) {
      return c10::str("'", base, ".tokens' holds id ", *lo < 0 ? *lo : *hi,
                      ", outside the tokenizer's vocabulary [0, ", tok.vocab_size(), ")");
    }
  }
  return std::nullopt;
}

// Tokenises the inputs into `base`.{tokens,mask,docs} and describes them in `base`.json, written
// last: a cache without its description is incomplete and is never read.
void build_cache(const DatasetOptions& o, const text::Tokenizer& tok, const std::string& base) {
  fs::make_dirs(o.cache_dir);
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> docs{0};
  int64_t skipped = 0;
  auto add = [&](const std::vector<int64_t>& ids, uint8_t m) {
    for (int64_t id : ids) {
      tokens.push_back(static_cast<int32_t>(id));
      mask.push_back(m);
    }
  };
  for (const auto& f : o.files) {
    std::ifstream in(f);
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::string problem;
      auto js = json::parse(line, nullptr, false);
      if (js.is_discarded() || !js.is_object()) {
        problem = "not a JSON object";
      } else if (o.mode == "pretrain") {
        std::string text;
        if (js.contains("text") && js["text"].is_string()) text = js["text"];
        else if (js.contains("source") && js.contains("target") && js["source"].is_string() && js["target"].is_string())
          text = js["source"].get<std::string>() + " " + js["target"].get<std::string>();
        else problem = "expected a string field \"text\" (or \"source\" and \"target\")";
        if (problem.empty()) add(tok.encode_with(text, true, true), 1);
      } else {
        Conversation conversation;
        if (!js.contains("messages") || !js["messages"].is_array() || js["messages"].empty()) {
          problem = "expected a non-empty array \"messages\"";
        } else {
          problem = read_messages(js["messages"], conversation);
        }
        if (problem.empty()) {
          const auto t = tokenize_conversation(tok, conversation, o.chat_template);
          tokens.insert(tokens.end(), t.ids.begin(), t.ids.end());
          mask.insert(mask.end(), t.mask.begin(), t.mask.end());
          docs.push_back(static_cast<int64_t>(tokens.size()));
        }
      }
      if (!problem.empty()) {
        COLOSSAL_CHECK(o.on_bad_line == "skip", "[data] '", f, "' line ", n, ": ", problem,
                       " (on_bad_line=skip skips such lines)");
        if (skipped++ < 5) COLOSSAL_LOG_WARN("[data] '", f, "' line ", n, ": ", problem, " (skipped)");
      }
    }
  }
  COLOSSAL_CHECK(!tokens.empty(), "[data] the inputs hold no usable lines");
  write_binary(base + ".tokens", tokens);
  write_binary(base + ".mask", mask);
  write_binary(base + ".docs", docs);
  json meta;
  meta["version"] = kCacheVersion;
  meta["files"] = o.files;
  meta["tokenizer"] = tok.origin();
  meta["vocab_size"] = tok.vocab_size();
  meta["num_tokens"] = tokens.size();
  meta["skipped_lines"] = skipped;
  meta["mode"] = o.mode;
  meta["crc32c"] = {{"tokens", checkpoint::crc32c(tokens.data(), tokens.size() * sizeof(int32_t))},
                    {"mask", checkpoint::crc32c(mask.data(), mask.size())},
                    {"docs", checkpoint::crc32c(docs.data(), docs.size() * sizeof(int64_t))}};
  checkpoint::write_text_atomically(base + ".json", meta.dump(2) + "\n");  // last: marks complete
}

}  // namespace

struct TokenDataset::Mapping : MappedFile {
  using MappedFile::MappedFile;
};

std::string read_messages(const nlohmann::json& array, Conversation& out) {
  out = Conversation{};
  if (!array.is_array()) return "expected an array of messages";
  for (const auto& m : array) {
    // {"role": user|assistant|system|tool, "content"} (transformers) or {"from": human|assistant, "content"}.
    const bool by_role = m.is_object() && m.contains("role") && m["role"].is_string();
    const std::string who = by_role ? m["role"].get<std::string>()
                            : m.is_object() && m.contains("from") && m["from"].is_string() ? m["from"].get<std::string>()
                                                                                            : "";
    const bool known = by_role ? (who == "user" || who == "assistant" || who == "system" || who == "tool")
                               : (who == "human" || who == "assistant");
    if (!known || !m.contains("content") || !m["content"].is_string())
      return "each message needs \"role\" (user, assistant, system or tool) or \"from\" (human or assistant), and "
             "a string \"content\"";
    const std::string role = who == "human" ? "user" : who;
    out.roles.push_back(nlohmann::ordered_json::parse(m.dump()));
    out.roles.back()["role"] = role;
    out.roles.back().erase("from");
    if (role == "user" || role == "assistant") out.turns.emplace_back(role == "user" ? "human" : "assistant", m["content"]);
  }
  return "";
}

TokenizedConversation tokenize_conversation(const text::Tokenizer& tok, const Conversation& c,
                                            const std::string& chat_template, size_t first_reply) {
  TokenizedConversation out;
  size_t reply = 0;
  auto add = [&](const std::vector<int64_t>& ids, bool assistant) {
    const uint8_t m = assistant && reply++ >= first_reply ? 1 : 0;
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.mask.insert(out.mask.end(), ids.size(), m);
  };
  if (chat_template == "auto" && !tok.chat_template().empty()) {
    for (const auto& seg : template_segments(tok, c.roles)) add(tok.encode(seg.text, false), seg.assistant);
    return out;
  }
  for (const auto& seg : apply_chat_template(chat_template == "auto" ? "llama2" : chat_template, c.turns)) {
    // BOS before each human turn, EOS after each reply, where the model has them.
    if (!seg.assistant) add(tok.encode_with(seg.text, true, false), false);
    else add(tok.encode_with(seg.text, false, true), true);
  }
  return out;
}

std::vector<ChatSegment> template_segments(const text::Tokenizer& tok, const nlohmann::ordered_json& messages) {
  std::vector<ChatSegment> out;
  std::string done;  // the text emitted so far: a prefix of every later rendering
  auto take = [&](const std::string& rendering, bool assistant, size_t turn) {
    COLOSSAL_CHECK(rendering.compare(0, done.size(), done) == 0, "[data] the chat template of ", tok.origin(),
                   " does not render this conversation prefix by prefix (at message ", turn,
                   "), so the replies cannot be told from the prompt; use --chat_template llama2 or another template");
    if (rendering.size() > done.size()) out.push_back({rendering.substr(done.size()), assistant});
    done = rendering;
  };
  for (size_t k = 0; k < messages.size(); ++k) {
    if (messages[k].value("role", "") != "assistant") continue;
    nlohmann::ordered_json before(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(k));
    nlohmann::ordered_json with(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(k + 1));
    take(text::render_chat(tok, before, /*add_generation_prompt=*/true), false, k);
    take(text::render_chat(tok, with, /*add_generation_prompt=*/false), true, k);
  }
  take(text::render_chat(tok, messages, /*add_generation_prompt=*/false), false, messages.size());
  return out;
}

std::vector<ChatSegment> apply_chat_template(const std::string& name,
                                             const std::vector<std::pair<std::string, std::string>>& messages) {
  COLOSSAL_CHECK(name == "llama2", "[data] unknown chat template '", name, "' (known: auto, llama2)");
  // LLaMA-2: <s>[INST] {human} [/INST] {assistant} </s> per exchange (BOS/EOS added by the
  // caller around each exchange).
  std::vector<ChatSegment> out;
  for (const auto& [from, content] : messages) {
    if (from == "human") out.push_back({"[INST] " + content + " [/INST]", false});
    else out.push_back({content, true});
  }
  return out;
}

TokenDataset::~TokenDataset() = default;
TokenDataset::TokenDataset(TokenDataset&&) noexcept = default;
TokenDataset& TokenDataset::operator=(TokenDataset&&) noexcept = default;

void DatasetOptions::validate() const {
  COLOSSAL_CHECK(!files.empty(), "[data] no input files");
  COLOSSAL_CHECK(mode == "pretrain" || mode == "sft", "[data] mode: expected pretrain or sft, got '", mode, "'");
  COLOSSAL_CHECK(on_bad_line == "stop" || on_bad_line == "skip", "[data] on_bad_line: expected stop or skip, got '",
                 on_bad_line, "'");
  COLOSSAL_CHECK(max_length >= 2, "[data] max_length must be >= 2, got ", max_length);
  COLOSSAL_CHECK(!packing || mode == "sft", "[data] packing applies to fine-tuning conversations (mode sft); ",
                 "pretraining already fills every sample with the token stream");
}

TokenDataset TokenDataset::open(const DatasetOptions& o, const text::Tokenizer& tok) {
  o.validate();
  // The cache key: inputs (path, size, mtime), the tokenizer's bytes, the options that change
  // the tokens.
  uint64_t h = 1469598103934665603ull;
  h = fnv(h, o.mode + "|" + o.chat_template + "|" + o.on_bad_line);
  for (const auto& f : o.files) {
    struct stat st {};
    COLOSSAL_CHECK(::stat(f.c_str(), &st) == 0, "[data] input '", f, "' does not exist");
    h = fnv(h, f + "|" + std::to_string(st.st_size) + "|" + std::to_string(st.st_mtim.tv_sec) + "." +
                   std::to_string(st.st_mtim.tv_nsec));
  }
  for (const auto& [name, bytes] : tok.files()) h = fnv(h, name + "|" + bytes);  // the tokenizer itself
  char key[17];
  std::snprintf(key, sizeof key, "%016llx", static_cast<unsigned long long>(h));
  TokenDataset d;
  d.options_ = o;
  d.key_ = key;
  d.pad_id_ = tok.pad_id() >= 0 ? tok.pad_id() : tok.eos_id();
  const std::string base = o.cache_dir + "/" + d.key_;
  struct stat st {};
  if (::stat((base + ".json").c_str(), &st) == 0) {
    if (auto problem = cache_problem(base, tok)) {
      COLOSSAL_LOG_WARN("[data] token cache ", *problem, "; tokenising ", o.files.front(),
                        o.files.size() > 1 ? c10::str(" and ", o.files.size() - 1, " more") : std::string(), " again");
    } else {
      d.reused_ = true;
    }
  }
  if (!d.reused_) build_cache(o, tok, base);
  if (auto problem = cache_problem(base, tok)) COLOSSAL_FAIL("[data] token cache just written ", *problem);
  auto meta = json::parse(read_file(base + ".json"));
  d.skipped_ = meta.value("skipped_lines", int64_t{0});
  d.tokens_ = std::make_unique<Mapping>(base + ".tokens");
  d.mask_ = std::make_unique<Mapping>(base + ".mask");
  std::string docs = read_file(base + ".docs");
  d.doc_offsets_.resize(docs.size() / sizeof(int64_t));
  std::memcpy(d.doc_offsets_.data(), docs.data(), docs.size());
  if (o.mode == "sft") {
    // A conversation counts when a reply token is a target inside the window: positions 1 to
    // max_length - 1 (position 0 is never predicted).
    const auto* msk = static_cast<const uint8_t*>(d.mask_->data);
    for (size_t i = 0; i + 1 < d.doc_offsets_.size(); ++i) {
      const int64_t begin = d.doc_offsets_[i], end = std::min(d.doc_offsets_[i + 1], begin + o.max_length);
      bool reply = false;
      for (int64_t t = begin + 1; t < end && !reply; ++t) reply = msk[t] != 0;
      if (reply) {
        d.samples_.push_back(static_cast<int64_t>(i));
      } else if (d.no_reply_++ == 0) {
        COLOSSAL_LOG_WARN("[data] conversation ", i, " (", d.doc_offsets_[i + 1] - begin,
                          " tokens) has no reply within max_length ", o.max_length, ": left out");
      }
    }
    if (d.no_reply_ > 1)
      COLOSSAL_LOG_WARN("[data] ", d.no_reply_, " of ", d.doc_offsets_.size() - 1, " conversations have no reply within ",
                        "max_length ", o.max_length, " and are left out; a longer max_length keeps them");
    COLOSSAL_CHECK(!d.samples_.empty(), "[data] none of the ", d.doc_offsets_.size() - 1,
                   " conversations has a reply within max_length ", o.max_length, ": nothing to learn");
    if (o.packing) d.pack();
  }
  return d;
}

void TokenDataset::pack() {
  // Best fit decreasing: longest conversations first, each into the fullest sample it fits in.
  const int64_t L = options_.max_length;
  std::vector<int64_t> order(samples_.size()), length(samples_.size());
  for (size_t i = 0; i < samples_.size(); ++i) {
    order[i] = static_cast<int64_t>(i);
    length[i] = std::min(doc_offsets_[samples_[i] + 1] - doc_offsets_[samples_[i]], L);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return length[a] > length[b]; });
  std::multiset<std::pair<int64_t, int64_t>> room;  // (tokens left, sample)
  std::vector<std::vector<int64_t>> packs;
  int64_t tokens = 0;
  for (int64_t i : order) {
    const int64_t n = length[i];
    tokens += n;
    auto fit = room.lower_bound({n, -1});  // the least room that holds n
    int64_t p, left;
    if (fit == room.end()) {
      p = static_cast<int64_t>(packs.size());
      packs.emplace_back();
      left = L - n;
    } else {
      p = fit->second;
      left = fit->first - n;
      room.erase(fit);
    }
    packs[static_cast<size_t>(p)].push_back(samples_[static_cast<size_t>(i)]);
    if (left > 0) room.insert({left, p});
  }
  pack_offsets_ = {0};
  pack_docs_.clear();
  for (const auto& docs : packs) {
    pack_docs_.insert(pack_docs_.end(), docs.begin(), docs.end());
    pack_offsets_.push_back(static_cast<int64_t>(pack_docs_.size()));
  }
  fill_ = static_cast<double>(tokens) / static_cast<double>(packs.size() * L);
}

int64_t TokenDataset::num_tokens() const { return static_cast<int64_t>(tokens_->bytes / sizeof(int32_t)); }

int64_t TokenDataset::size() const {
  if (options_.mode == "pretrain") return num_tokens() / options_.max_length;
  if (options_.packing) return static_cast<int64_t>(pack_offsets_.size()) - 1;
  return static_cast<int64_t>(samples_.size());
}

Batch TokenDataset::batch(const std::vector<int64_t>& indices) const {
  const int64_t L = options_.max_length, B = static_cast<int64_t>(indices.size());
  auto ids = torch::full({B, L}, pad_id_, torch::kInt64);
  auto labels = torch::full({B, L}, -100, torch::kInt64);
  auto* tok = static_cast<const int32_t*>(tokens_->data);
  auto* msk = static_cast<const uint8_t*>(mask_->data);
  auto* ip = ids.data_ptr<int64_t>();
  auto* lp = labels.data_ptr<int64_t>();
  if (options_.packing) {
    // Each conversation as its own sample would hold it, its first token no target (it would be
    // predicted from the conversation before); the padding after the last one a document of its own.
    auto positions = torch::empty({B, L}, torch::kInt64);
    auto* pp = positions.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      const int64_t p = indices[b];
      COLOSSAL_CHECK(p >= 0 && p < size(), "[data] sample ", p, " is outside [0, ", size(), ")");
      int64_t col = 0;
      for (int64_t k = pack_offsets_[p]; k < pack_offsets_[p + 1]; ++k) {
        const int64_t doc = pack_docs_[k], begin = doc_offsets_[doc];
        const int64_t end = std::min(doc_offsets_[doc + 1], begin + L);
        for (int64_t t = begin; t < end; ++t, ++col) {
          ip[b * L + col] = tok[t];
          lp[b * L + col] = msk[t] && t > begin ? tok[t] : -100;
          pp[b * L + col] = t - begin;
        }
      }
      for (int64_t pad = 0; col < L; ++col, ++pad) pp[b * L + col] = pad;
    }
    return {ids, labels, positions};
  }
  for (int64_t b = 0; b < B; ++b) {
    int64_t i = indices[b];
    COLOSSAL_CHECK(i >= 0 && i < size(), "[data] sample ", i, " is outside [0, ", size(), ")");
    const int64_t doc = options_.mode == "pretrain" ? -1 : samples_[static_cast<size_t>(i)];
    int64_t begin = options_.mode == "pretrain" ? i * L : doc_offsets_[doc];
    int64_t end = options_.mode == "pretrain" ? begin + L : std::min(doc_offsets_[doc + 1], begin + L);
    for (int64_t t = begin; t < end; ++t) {
      ip[b * L + (t - begin)] = tok[t];
      lp[b * L + (t - begin)] = msk[t] ? tok[t] : -100;
    }
  }
  return {ids, labels, {}};
}

}  // namespace colossal::llama
