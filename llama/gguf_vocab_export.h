#pragma once
// A Hugging Face directory's tokenizer as GGUF metadata, under the keys llama.cpp's converter
// writes: a SentencePiece tokenizer.model as tokenizer.ggml.model "llama" (pieces, scores, types),
// or a byte-level BPE tokenizer.json as "gpt2" (tokens, types, merges, and the pre-tokenizer's
// published name, recognised from its Split regexes); special ids, add_bos/add_eos and the chat
// template in both. Errors name the file and what this version cannot write.
#include <string>

#include "core/checkpoint/gguf_writer.h"
#include "llama/config.h"

namespace colossal::llama {

/// Adds `dir`'s tokenizer (tokenizer.model when present, else tokenizer.json) for a model of `c`.
void add_gguf_vocabulary(checkpoint::GgufWriter& out, const std::string& dir, const LlamaConfig& c);

}  // namespace colossal::llama
