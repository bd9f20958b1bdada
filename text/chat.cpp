#include "text/chat.h"

#include "core/common/check.h"
#include "text/jinja.h"

namespace colossal::text {

std::string render_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages, bool add_generation_prompt,
                        const nlohmann::ordered_json& tools) {
  const std::string source = tokenizer.chat_template();
  COLOSSAL_CHECK(!source.empty(), "[chat] ", tokenizer.origin(), " has no chat template");
  // Parsed once per tokenizer (templates are a few KiB; conversations many).
  thread_local std::string cached_source;
  thread_local std::unique_ptr<JinjaTemplate> cached;
  if (!cached || cached_source != source) {
    cached = std::make_unique<JinjaTemplate>(source, "chat template of " + tokenizer.origin());
    cached_source = source;
  }
  nlohmann::ordered_json context;
  context["messages"] = messages;
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  for (const auto& [name, text] : tokenizer.special_token_names()) context[name] = text;
  return cached->render(context);
}

std::vector<int64_t> encode_chat(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                 bool add_generation_prompt, const nlohmann::ordered_json& tools) {
  return tokenizer.encode(render_chat(tokenizer, messages, add_generation_prompt, tools), false);
}

}  // namespace colossal::text
