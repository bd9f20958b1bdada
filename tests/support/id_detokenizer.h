#pragma once
// What the engine tests share: token ids as "<id>" text (outputs compare without a tokenizer),
// greedy requests and prompts made of a formula's tokens.
#include <string>
#include <vector>

#include "core/inference/engine.h"
#include "core/inference/model.h"

namespace colossal::testing {

class IdDetokenizer : public inference::Detokenizer {
 public:
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::string s;
    for (auto t : ids) s += "<" + std::to_string(t) + ">";
    return s;
  }
};

/// `len` tokens below `vocab`, varying with `salt`.
inline std::vector<int64_t> prompt_of(int64_t len, int64_t salt, int64_t vocab) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back((i * 31 + salt * 7 + 3) % vocab);
  return p;
}

/// `n` tokens of greedy decoding, past any end-of-sequence token.
inline inference::GenerationRequest greedy_request(std::vector<int64_t> prompt, int64_t n) {
  inference::GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  return r;
}

}  // namespace colossal::testing
