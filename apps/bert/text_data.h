#pragma once
// train_bert's data: labelled texts (JSON lines, or the built-in Austen passages), a WordPiece
// vocabulary learnt from them when the user brings no tokenizer, and the batches the model takes.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/types.h>

#include "text/tokenizer.h"

namespace colossal::bert_app {

struct LabelledTexts {
  std::vector<std::string> texts;
  std::vector<int64_t> labels;  // -1: none (masked-LM data)
};

struct TextData {
  LabelledTexts train, eval;
  std::vector<std::string> class_names;  // label -> name
  std::string description;
};

/// The built-in task: passages of `words` words from Jane Austen's six novels (Debian's
/// r-cran-janeaustenr, fetched by scripts/setup.sh), each labelled with the novel it comes from.
/// Every `held_out_every`-th passage of each novel is held out for evaluation.
TextData austen_passages(const std::string& rdb_path, int64_t words = 64, int64_t held_out_every = 10);

/// JSON lines {"text": ..., "label": ...} (label a name or an integer; absent for masked-LM
/// data). Names are numbered in sorted order unless `class_names` already fixes them. Errors name
/// the file and line.
LabelledTexts read_jsonl(const std::string& path, bool labelled, std::vector<std::string>& class_names);

/// Every `held_out_every`-th text (by position) moved to `eval`.
void hold_out(LabelledTexts& all, LabelledTexts& eval, int64_t held_out_every);

/// A WordPiece vocabulary learnt from `texts` as BERT's uncased tokenizer sees them (lowercase,
/// accents stripped, split at whitespace and punctuation): [PAD] [UNK] [CLS] [SEP] [MASK], every
/// character seen (alone and as a "##" continuation), then the most frequent words up to
/// `vocab_size`. Returned as the files of a Hugging Face directory: tokenizer.json,
/// tokenizer_config.json and vocab.txt (what BertTokenizerFast reads).
std::map<std::string, std::string> learn_wordpiece(const std::vector<std::string>& texts, int64_t vocab_size);

/// A padded batch: ids [B, N] (N the longest, at most max_length with [SEP] kept last), the
/// attention mask and token types.
struct TextBatch {
  torch::Tensor input_ids, attention_mask, token_type_ids, labels;
};
TextBatch make_batch(const text::Tokenizer& tok, const LabelledTexts& data, const std::vector<int64_t>& idx,
                     int64_t max_length);

/// Masked-LM corruption of a batch, as BERT's: 15% of the real tokens (never [CLS]/[SEP]/[PAD])
/// predicted; of those 80% become [MASK], 10% a random token, 10% stay. Each sample's draws come
/// from (seed, epoch, sample index), so any layout masks a sample alike. labels: -100 elsewhere.
void mask_tokens(TextBatch& b, const std::vector<int64_t>& idx, uint64_t seed, int64_t epoch, int64_t mask_id,
                 int64_t vocab_size, const text::Tokenizer& tok, double probability = 0.15);

}  // namespace colossal::bert_app
