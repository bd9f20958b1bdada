#pragma once
// The byte-level BPE pre-tokenizers that GGUF files name in tokenizer.ggml.pre (llama.cpp's
// converter writes the name, from a hash of the model's tokenizer), each as the Split regexes of
// the model's own tokenizer.json: applied in order, each isolating its matches, then ByteLevel.
// Read by llama/gguf.cpp (a file's name back to a tokenizer) and written by the exporter (a
// tokenizer.json's regexes to a name).
#include <map>
#include <string>
#include <vector>

namespace colossal::llama {

struct PreSplit {
  std::vector<const char*> regexes;
  bool ignore_merges;  // whole words found in the vocabulary are taken as they are (Llama 3 sets it)
};

/// Every name this project reads, with its split.
const std::map<std::string, PreSplit>& gguf_pre_splits();

/// The name to write for a tokenizer.json whose Split regexes are `regexes` (in order); empty when
/// none matches.
std::string gguf_pre_name(const std::vector<std::string>& regexes, bool ignore_merges);

}  // namespace colossal::llama
