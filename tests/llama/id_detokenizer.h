#pragma once
// The engine tests' detokenizer: token ids as "<id>" text, so outputs compare without a tokenizer.
#include <string>
#include <vector>

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

}  // namespace colossal::testing
