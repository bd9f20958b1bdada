#pragma once
// generation_config.json: the sampling a model's authors ship as its defaults (transformers'
// GenerationConfig), for the front ends to use where a request or a flag does not say.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace colossal::llama {

struct GenerationDefaults {
  std::optional<bool> do_sample;  // false: greedy
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k, max_new_tokens;
  std::vector<int64_t> eos_token_ids;  // every id that ends generation (an int or a list in the file)
  /// Reads `dir`/generation_config.json; a missing file gives no defaults. A field of the wrong
  /// type is an error naming the file and the field.
  static GenerationDefaults read(const std::string& dir);
};

}  // namespace colossal::llama
