#pragma once
// Our SentencePiece tokenizer in the form Hugging Face tokenizers and transformers read without
// SentencePiece or protobuf: tokenizer.json (a byte-fallback BPE model with its merges, the
// Metaspace pre-tokenizer, BOS added by the post-processor), tokenizer_config.json (the LLaMA
// tokenizer class, BOS/EOS/UNK, add_bos_token) and special_tokens_map.json.
//
// The merges are derived from the vocabulary: every split of a piece into two pieces is a merge,
// ranked by the merged piece's score (SentencePiece's BPE merges the best-scoring pair first).
// A unigram model is written as a Unigram model with its scores.
#include <map>
#include <string>

#include "llama/tokenizer.h"

namespace colossal::llama {

/// tokenizer.json text.
std::string hf_tokenizer_json(const Tokenizer& tokenizer);
/// tokenizer_config.json text; `model_max_length` from the model's max_position_embeddings.
std::string hf_tokenizer_config_json(const Tokenizer& tokenizer, int64_t model_max_length);

/// Every tokenizer file of a model directory, by name: the SentencePiece model itself
/// (tokenizer.model) and the three above.
std::map<std::string, std::string> hf_tokenizer_files(const Tokenizer& tokenizer, int64_t model_max_length);

}  // namespace colossal::llama
