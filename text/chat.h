#pragma once
// A conversation through a model's chat template, as transformers' apply_chat_template renders it:
// the template gets `messages`, `tools` and `documents` (null when absent),
// `add_generation_prompt` and the special tokens' text (bos_token, eos_token, ...).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace colossal::text {

/// The rendered text. `messages`: [{"role": ..., "content": ...}, ...] (tool calls and the like
/// pass through to the template). Throws when the tokenizer has no template, or naming the
/// template's line or its raise_exception message.
std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                        const nlohmann::ordered_json& tools = nullptr);
/// The ids of the rendered text (the template writes the special tokens: none are added).
std::vector<int64_t> encode_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const nlohmann::ordered_json& tools = nullptr);

}  // namespace colossal::text
