// The byte-level BPE pre-tokenizers GGUF files name (tokenizer.ggml.pre), as their models'
// tokenizer.json files write them.
#include "llama/gguf_pre_splits.h"

#include "text/unicode.h"

namespace colossal::llama {

namespace pre_split_regexes {  // named: the unity build puts other files' helpers beside these
constexpr const char* kLlama3Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kQwen2Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
    "\\s+(?!\\S)|\\s+";
constexpr const char* kQwen35Split =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGpt2Split = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
constexpr const char* kTekkenSplit =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kGpt4oSplit =
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr const char* kDeepseek3Split =
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace pre_split_regexes

const std::map<std::string, PreSplit>& gguf_pre_splits() {
  using namespace pre_split_regexes;  // NOLINT(build/namespaces): the table below reads them all
  static const std::map<std::string, PreSplit> m = {
      // Llama 3 and the models that took its tokenizer's split.
      {"llama-bpe", {{kLlama3Split}, true}},
      {"dbrx", {{kLlama3Split}, false}},
      {"smaug-bpe", {{kLlama3Split}, false}},
      {"chatglm-bpe", {{kLlama3Split}, false}},
      // Qwen2, Qwen2.5, Qwen3 (and StableLM 2, Hunyuan); Qwen3.5 keeps marks with their letters.
      {"qwen2", {{kQwen2Split}, false}},
      {"stablelm2", {{kQwen2Split}, false}},
      {"hunyuan", {{kQwen2Split}, false}},
      {"qwen35", {{kQwen35Split}, false}},
      // GPT-2's own regex (ByteLevel's), and the models that kept it.
      {"gpt-2", {{kGpt2Split}, false}},
      {"mpt", {{kGpt2Split}, false}},
      {"olmo", {{kGpt2Split}, false}},
      {"jais", {{kGpt2Split}, false}},
      // Digits one by one, then GPT-2's regex (StarCoder, SmolLM, Command R, EXAONE, ...).
      {"starcoder", {{"\\p{N}", kGpt2Split}, false}},
      {"refact", {{"\\p{N}", kGpt2Split}, false}},
      {"command-r", {{"\\p{N}", kGpt2Split}, false}},
      {"smollm", {{"\\p{N}", kGpt2Split}, false}},
      {"codeshell", {{"\\p{N}", kGpt2Split}, false}},
      {"exaone", {{"\\p{N}", kGpt2Split}, false}},
      {"minerva-7b", {{"\\p{N}", kGpt2Split}, false}},
      // Mistral's Tekken (Nemo, Small 3, Pixtral) and GPT-4o's split (Phi-4, MiniMax).
      {"tekken", {{kTekkenSplit}, false}},
      {"gpt-4o", {{kGpt4oSplit}, false}},
      {"minimax-m2", {{kGpt4oSplit}, false}},
      // DeepSeek V3/R1: digits in threes, CJK runs, then the rest.
      {"deepseek-v3", {{"\\p{N}{1,3}", "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+", kDeepseek3Split},
                       false}},
  };
  return m;
}

namespace pre_split_regexes {
// `regex` with its \x{HHHH} escapes written as the characters (UTF-8), as tokenizer.json files
// hold them once JSON's own escapes are read.
std::string literal(const std::string& regex) {
  std::string out;
  for (size_t i = 0; i < regex.size(); ++i) {
    const size_t close = regex.compare(i, 3, "\\x{") == 0 ? regex.find('}', i) : std::string::npos;
    if (close == std::string::npos) {
      out += regex[i];
      continue;
    }
    text::append_utf8(out, static_cast<char32_t>(std::stoul(regex.substr(i + 3, close - i - 3), nullptr, 16)));
    i = close;
  }
  return out;
}
}  // namespace pre_split_regexes

std::string gguf_pre_name(const std::vector<std::string>& regexes, bool ignore_merges) {
  // Several names stand for one split (llama.cpp tells them apart by other traits): the first
  // model that published it, and Llama 3's name only with its ignore_merges.
  static const char* const kPreferred[] = {"llama-bpe", "dbrx",      "qwen2", "qwen35",      "gpt-2",
                                           "starcoder", "tekken",    "gpt-4o", "deepseek-v3"};
  for (const char* name : kPreferred) {
    const auto& split = gguf_pre_splits().at(name);
    if (split.ignore_merges != ignore_merges && std::string(name) == "llama-bpe") continue;
    if (split.regexes.size() != regexes.size()) continue;
    bool same = true;
    for (size_t i = 0; i < regexes.size(); ++i)
      same = same && (regexes[i] == split.regexes[i] || regexes[i] == pre_split_regexes::literal(split.regexes[i]));
    if (same) return name;
  }
  return "";
}

}  // namespace colossal::llama
