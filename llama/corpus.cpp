#include "llama/corpus.h"

#include "core/common/env.h"

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <fstream>
#include <random>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::llama {
namespace {

uint32_t be32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// Reads one XDR-serialized object; keeps it when it is a character vector.
struct XdrReader {
  const std::string& buf;
  size_t pos = 0;
  std::string where;
  int32_t int32() {
    COLOSSAL_CHECK(pos + 4 <= buf.size(), "[corpus] ", where, ": truncated at byte ", pos);
    auto v = static_cast<int32_t>(be32(reinterpret_cast<const unsigned char*>(buf.data() + pos)));
    pos += 4;
    return v;
  }
  std::string bytes(int32_t n) {
    COLOSSAL_CHECK(n >= 0 && pos + static_cast<size_t>(n) <= buf.size(), "[corpus] ", where,
                   ": a string of ", n, " bytes runs past the end at byte ", pos);
    std::string s = buf.substr(pos, n);
    pos += n;
    return s;
  }
};

}  // namespace

std::vector<std::vector<std::string>> read_r_character_vectors(const std::string& rdb_path) {
  std::ifstream in(rdb_path, std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[corpus] cannot read '", rdb_path, "'");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::vector<std::string>> out;
  size_t pos = 0;
  for (int record = 0; pos < data.size(); ++record) {
    std::string where = "'" + rdb_path + "' record " + std::to_string(record);
    COLOSSAL_CHECK(pos + 4 <= data.size(), "[corpus] ", where, ": truncated length at byte ", pos);
    uint32_t expected = be32(reinterpret_cast<const unsigned char*>(data.data() + pos));
    pos += 4;
    std::string raw(expected, '\0');
    z_stream z{};
    COLOSSAL_CHECK(inflateInit(&z) == Z_OK, "[corpus] zlib initialisation failed");
    z.next_in = reinterpret_cast<Bytef*>(data.data() + pos);
    z.avail_in = static_cast<uInt>(data.size() - pos);
    z.next_out = reinterpret_cast<Bytef*>(raw.data());
    z.avail_out = expected;
    int rc = inflate(&z, Z_FINISH);
    size_t consumed = z.total_in, produced = z.total_out;
    inflateEnd(&z);
    COLOSSAL_CHECK(rc == Z_STREAM_END && produced == expected, "[corpus] ", where, " at byte ", pos,
                   ": not a complete zlib stream of ", expected, " bytes (zlib status ", rc, ")");
    pos += consumed;

    XdrReader r{raw, 0, where};
    COLOSSAL_CHECK(raw.size() >= 2 && raw.compare(0, 2, "X\n") == 0, "[corpus] ", where,
                   ": not R's XDR serialization (expected \"X\\n\")");
    r.pos = 2;
    int32_t version = r.int32();
    r.int32();  // R version that wrote it
    r.int32();  // minimal R version to read it
    if (version == 3) r.bytes(r.int32());  // native encoding name
    int32_t flags = r.int32();
    if ((flags & 0xFF) != 16) continue;  // not a character vector
    int32_t n = r.int32();
    COLOSSAL_CHECK(n >= 0, "[corpus] ", where, ": negative vector length ", n);
    std::vector<std::string> strings;
    strings.reserve(n);
    for (int32_t i = 0; i < n; ++i) {
      int32_t f = r.int32();
      COLOSSAL_CHECK((f & 0xFF) == 9, "[corpus] ", where, ": element ", i, " has type ", f & 0xFF,
                     ", expected 9 (a string)");
      int32_t len = r.int32();
      strings.push_back(len < 0 ? std::string() : r.bytes(len));  // NA reads as empty
    }
    out.push_back(std::move(strings));
  }
  return out;
}

CorpusSplit write_austen_jsonl(const std::string& rdb_path, const std::string& out_dir, int valid_every) {
  COLOSSAL_CHECK(valid_every >= 2, "[corpus] valid_every must be >= 2");
  auto novels = read_r_character_vectors(rdb_path);
  COLOSSAL_CHECK(!novels.empty(), "[corpus] '", rdb_path, "' holds no character vectors");
  std::ostringstream train, valid;
  CorpusSplit split;
  int64_t paragraph = 0;
  auto emit = [&](std::string& text) {
    if (text.empty()) return;
    std::string line = nlohmann::json{{"text", text}}.dump() + "\n";
    bool held_out = ++paragraph % valid_every == 0;
    (held_out ? valid : train) << line;
    (held_out ? split.valid_records : split.train_records)++;
    (held_out ? split.valid_bytes : split.train_bytes) += static_cast<int64_t>(text.size());
    text.clear();
  };
  for (const auto& lines : novels) {
    std::string text;
    for (const auto& l : lines) {
      if (l.find_first_not_of(" \t") == std::string::npos) {
        emit(text);
        continue;
      }
      if (!text.empty()) text += ' ';
      text += l;
    }
    emit(text);
  }
  fs::make_dirs(out_dir);
  checkpoint::write_text_atomically(out_dir + "/train.jsonl", train.str());
  checkpoint::write_text_atomically(out_dir + "/valid.jsonl", valid.str());
  return split;
}

int64_t write_preference_pairs(const std::string& text_jsonl, const std::string& out_jsonl, uint64_t seed,
                               int prompt_words, int answer_words) {
  COLOSSAL_CHECK(prompt_words >= 1 && answer_words >= 2, "[corpus] preference pairs need a prompt word and two "
                 "answer words");
  std::ifstream in(text_jsonl);
  COLOSSAL_CHECK(in.good(), "[corpus] cannot read '", text_jsonl, "'");
  std::mt19937_64 rng(seed);
  std::ostringstream out;
  int64_t pairs = 0;
  std::string line;
  auto join = [](const std::vector<std::string>& w, size_t begin, size_t end) {
    std::string s;
    for (size_t i = begin; i < end; ++i) s += (i > begin ? " " : "") + w[i];
    return s;
  };
  for (int64_t n = 1; std::getline(in, line); ++n) {
    auto js = nlohmann::json::parse(line, nullptr, false);
    if (js.is_discarded() || !js.contains("text") || !js["text"].is_string()) continue;
    std::istringstream words_in(js["text"].get<std::string>());
    std::vector<std::string> words;
    for (std::string w; words_in >> w;) words.push_back(w);
    const size_t p = static_cast<size_t>(prompt_words), a = static_cast<size_t>(answer_words);
    if (words.size() < p + a) continue;
    std::vector<std::string> answer(words.begin() + static_cast<std::ptrdiff_t>(p),
                                    words.begin() + static_cast<std::ptrdiff_t>(p + a));
    // The rejected answer: two failures of a weak sampler, in turn — the same words out of order,
    // and the first half said twice.
    auto rejected = answer;
    if (pairs % 2 == 0) {
      for (int tries = 0; tries < 8 && rejected == answer; ++tries) std::shuffle(rejected.begin(), rejected.end(), rng);
    } else {
      for (size_t i = a / 2; i < a; ++i) rejected[i] = answer[i - a / 2];
    }
    if (rejected == answer) continue;  // the same words in every order
    out << nlohmann::json{{"prompt", join(words, 0, p)}, {"chosen", join(answer, 0, a)},
                          {"rejected", join(rejected, 0, a)}}
               .dump()
        << "\n";
    ++pairs;
  }
  checkpoint::write_text_atomically(out_jsonl, out.str());
  return pairs;
}

std::string default_austen_rdb() {
  return cache_root() + "/corpus/janeaustenr/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb";
}

}  // namespace colossal::llama
