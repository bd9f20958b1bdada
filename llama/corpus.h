#pragma once
// The built-in default corpus: Jane Austen's six novels from Debian's r-cran-janeaustenr
// (fetched and unpacked by scripts/setup.sh, never committed).
//
// The package stores them as R serialized data in data/Rdata.rdb: a sequence of records, each a
// 4-byte big-endian length followed by a zlib stream holding R's XDR serialization ("X\n",
// version, R versions, [encoding], then the object). A novel is a character vector (type 16)
// of lines, each a CHARSXP (type 9: flags, length or -1 for NA, bytes).
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::llama {

/// Every character vector stored in an R lazy-load database (.rdb), in file order. Throws
/// naming the file, record and offset for anything malformed.
std::vector<std::vector<std::string>> read_r_character_vectors(const std::string& rdb_path);

struct CorpusSplit {
  int64_t train_records = 0, valid_records = 0, train_bytes = 0, valid_bytes = 0;
};

/// Writes <out_dir>/train.jsonl and valid.jsonl: one {"text": paragraph} per line (lines joined,
/// paragraphs split at blank lines), every `valid_every`-th paragraph held out for evaluation.
CorpusSplit write_austen_jsonl(const std::string& rdb_path, const std::string& out_dir, int valid_every = 50);

/// Built-in preference pairs from a {"text"} JSONL file (write_austen_jsonl's): per paragraph of
/// at least prompt_words + answer_words words, {"prompt": its first prompt_words words, "chosen":
/// the answer_words that follow, "rejected": those words in a shuffled order (seeded), or, every
/// other pair, their first half said twice}. A model that learns the pairs prefers the text to
/// the two failures of a weak sampler. Returns the pairs written.
int64_t write_preference_pairs(const std::string& text_jsonl, const std::string& out_jsonl, uint64_t seed = 0,
                               int prompt_words = 8, int answer_words = 12);

/// Where setup.sh unpacks the package's data (under the project cache).
std::string default_austen_rdb();

}  // namespace colossal::llama
