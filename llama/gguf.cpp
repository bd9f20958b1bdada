#include "llama/gguf.h"
#include "llama/gguf_pre_splits.h"

#include <nlohmann/json.hpp>

#include "text/hf_tokenizer.h"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <optional>

#include "core/common/check.h"
#include "kernels/cpu/kquants.h"
#include "llama/inference.h"

namespace colossal::llama {

namespace {

using checkpoint::GgmlType;
using checkpoint::GgufFile;
using checkpoint::GgufTensor;
using inference::PackedLinear;
using inference::WeightFormat;

constexpr uint32_t type_id(GgmlType t) { return static_cast<uint32_t>(t); }

// Protocol-buffer wire format, enough for SentencePiece's ModelProto.
void varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}
void field_varint(std::string& out, int field, uint64_t v) {
  varint(out, static_cast<uint64_t>(field) << 3);
  varint(out, v);
}
void field_bytes(std::string& out, int field, const std::string& bytes) {
  varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  varint(out, bytes.size());
  out += bytes;
}
void field_float(std::string& out, int field, float v) {
  varint(out, (static_cast<uint64_t>(field) << 3) | 5);
  char b[4];
  std::memcpy(b, &v, 4);
  out.append(b, 4);
}

std::string unsupported_type(const GgufFile& f, const GgufTensor& t) {
  return "[gguf] " + f.path() + ": tensor '" + t.name + "' is " + checkpoint::ggml_type_name(t.type) +
         "; this version reads F32, F16, BF16, Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K tensors "
         "(llama-quantize can rewrite the file in those, e.g. Q4_K_M)";
}

// The format a ggml type is kept in as it is (its blocks, bit for bit), if we have one.
std::optional<WeightFormat> native_format(uint32_t type) {
  switch (type) {
    case type_id(GgmlType::kF16): return WeightFormat::kF16;
    case type_id(GgmlType::kBF16): return WeightFormat::kBF16;
    case type_id(GgmlType::kQ8_0): return WeightFormat::kQ8;
    case type_id(GgmlType::kQ4_0): return WeightFormat::kQ4;
    case type_id(GgmlType::kQ2_K): return WeightFormat::kQ2K;
    case type_id(GgmlType::kQ3_K): return WeightFormat::kQ3K;
    case type_id(GgmlType::kQ4_K): return WeightFormat::kQ4K;
    case type_id(GgmlType::kQ5_K): return WeightFormat::kQ5K;
    case type_id(GgmlType::kQ6_K): return WeightFormat::kQ6K;
    default: return std::nullopt;
  }
}

// A GGUF tensor as fp32 [rows, cols] (a vector: [1, n]).
at::Tensor dequantized(const GgufFile& f, const GgufTensor& t) {
  const int64_t cols = t.shape[0], rows = t.elements() / cols;
  COLOSSAL_CHECK(t.bytes > 0, unsupported_type(f, t));
  auto* data = const_cast<uint8_t*>(t.data);
  switch (t.type) {
    case type_id(GgmlType::kF32): return at::from_blob(data, {rows, cols}, at::kFloat).clone();
    case type_id(GgmlType::kF16): return at::from_blob(data, {rows, cols}, at::kHalf).to(at::kFloat);
    case type_id(GgmlType::kBF16): return at::from_blob(data, {rows, cols}, at::kBFloat16).to(at::kFloat);
    case type_id(GgmlType::kQ8_0): return PackedLinear::from_ggml_blocks(WeightFormat::kQ8, rows, cols, t.data).unpacked();
    case type_id(GgmlType::kQ4_0): return PackedLinear::from_ggml_blocks(WeightFormat::kQ4, rows, cols, t.data).unpacked();
    default: break;
  }
  const auto k = native_format(t.type);
  COLOSSAL_CHECK(k && kernels::cpu::is_kquant(*k) && cols % kernels::cpu::kSuperBlock == 0, unsupported_type(f, t));
  auto out = at::empty({rows, cols}, at::kFloat);
  kernels::cpu::dequantize_kquant(*k, t.data, rows * cols, out.data_ptr<float>());
  return out;
}

// How load_gguf stores matrices: in `format`, except that with keep_native the f16, bf16, q8_0,
// q4_0 and K-quant blocks stay as the file has them (a GGUF file mixes types per tensor: Q4_K_M is mostly
// Q4_K with Q6_K in places). An f32 matrix then takes `format`, or int8 when that is a K-quant
// (we have no K-quant quantizer).
struct MatrixFormat {
  WeightFormat format;
  bool keep_native = false;
};

// A matrix in `how.format`: f16/bf16/q8_0/q4_0/K-quant values kept as they are when the format is theirs or
// with keep_native.
PackedLinear matrix(const GgufFile& f, const std::string& name, const MatrixFormat& how, int64_t rows, int64_t cols) {
  const auto& t = f.tensor(name);
  COLOSSAL_CHECK(t.shape.size() == 2 && t.shape[0] == cols && t.shape[1] == rows, "[gguf] ", f.path(), ": tensor '",
                 name, "' has ggml shape [", t.shape[0], t.shape.size() > 1 ? ", " + std::to_string(t.shape[1]) : "",
                 "], expected [", cols, ", ", rows, "] (columns first)");
  COLOSSAL_CHECK(t.bytes > 0, unsupported_type(f, t));
  const auto native = native_format(t.type);
  if (native && (how.keep_native || *native == how.format))
    return PackedLinear::from_ggml_blocks(*native, rows, cols, t.data);
  return PackedLinear(dequantized(f, t), kernels::cpu::is_kquant(how.format) ? WeightFormat::kQ8 : how.format);
}

at::Tensor norm_vector(const GgufFile& f, const std::string& name, int64_t n) {
  const auto& t = f.tensor(name);
  COLOSSAL_CHECK(t.elements() == n, "[gguf] ", f.path(), ": tensor '", name, "' has ", t.elements(),
                 " values, expected ", n);
  return dequantized(f, t).reshape({n}).contiguous();
}

// llama.cpp's converter stores each head's query (key) rows as pairs (2i, 2i + 1) of the
// rotate-half layout's (i, i + d/2): row h*d + 2i + j of the file is row h*d + j*d/2 + i of ours.
std::vector<int64_t> unpermute_rotary(int64_t heads, int64_t d) {
  std::vector<int64_t> order(static_cast<size_t>(heads * d));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < d / 2; ++i) order[static_cast<size_t>(h * d + j * (d / 2) + i)] = h * d + 2 * i + j;
  return order;
}

}  // namespace

bool is_gguf_path(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
}

namespace {

void read_special_ids(const GgufFile& f, LlamaConfig& c) {
  if (f.has("tokenizer.ggml.bos_token_id")) c.bos_token_id = f.get_int("tokenizer.ggml.bos_token_id");
  if (f.has("tokenizer.ggml.eos_token_id")) c.eos_token_id = f.get_int("tokenizer.ggml.eos_token_id");
  if (f.has("tokenizer.ggml.padding_token_id")) c.pad_token_id = f.get_int("tokenizer.ggml.padding_token_id");
}

// GPT-2 as llama.cpp's converter writes it: one fused attn_qkv (with bias), learned positions
// (position_embd), LayerNorms with biases, an ungated GELU MLP with biases. The converter writes
// feed_forward_length as 4 x embedding_length whatever n_inner is, so the MLP width is read from
// ffn_up's shape.
LlamaConfig gguf_gpt2_config(const GgufFile& f) {
  LlamaConfig c;
  c.model_type = "gpt2";
  c.learned_positions = c.layer_norm = c.mlp_bias = c.attention_bias = true;
  c.gated_mlp = false;
  c.hidden_act = "gelu_pytorch_tanh";  // llama.cpp's GPT-2 uses the tanh GELU, as gelu_new
  c.num_hidden_layers = f.get_int("gpt2.block_count");
  c.hidden_size = f.get_int("gpt2.embedding_length");
  c.num_attention_heads = f.get_int("gpt2.attention.head_count");
  c.num_key_value_heads = c.num_attention_heads;
  c.max_position_embeddings = f.get_int("gpt2.context_length");
  c.rms_norm_eps = f.get_float("gpt2.attention.layer_norm_epsilon", 1e-5);
  const auto& embed = f.tensor("token_embd.weight");
  COLOSSAL_CHECK(embed.shape.size() == 2 && embed.shape[0] == c.hidden_size, "[gguf] ", f.path(),
                 ": token_embd.weight's ggml shape does not start with embedding_length ", c.hidden_size);
  c.vocab_size = embed.shape[1];
  const auto& up = f.tensor("blk.0.ffn_up.weight");
  COLOSSAL_CHECK(up.shape.size() == 2 && up.shape[0] == c.hidden_size, "[gguf] ", f.path(),
                 ": blk.0.ffn_up.weight's ggml shape does not start with embedding_length ", c.hidden_size);
  c.intermediate_size = up.shape[1];
  const auto& positions = f.tensor("position_embd.weight");
  COLOSSAL_CHECK(positions.shape.size() == 2 && positions.shape[0] == c.hidden_size, "[gguf] ", f.path(),
                 ": position_embd.weight's ggml shape does not start with embedding_length ", c.hidden_size);
  c.max_position_embeddings = positions.shape[1];  // the table bounds the context, whatever the key says
  c.tie_word_embeddings = f.find("output.weight") == nullptr;
  COLOSSAL_CHECK(c.num_hidden_layers >= 1 && c.num_attention_heads >= 1 && c.hidden_size % c.num_attention_heads == 0,
                 "[gguf] ", f.path(), ": gpt2: embedding_length ", c.hidden_size, " does not split into ",
                 c.num_attention_heads, " heads");
  c.bos_token_id = c.eos_token_id = 50256;
  read_special_ids(f, c);
  try {
    c.validate();
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[gguf] ", f.path(), ": ", e.what());
  }
  return c;
}

}  // namespace

LlamaConfig gguf_llama_config(const GgufFile& f) {
  // LLaMA and the families llama.cpp stores with the same tensors: Qwen2 (q/k/v biases) and
  // Qwen3 (q/k norms); GPT-2 with its own. Keys are prefixed by the architecture's name.
  const std::string arch = f.get_string("general.architecture");
  if (arch == "gpt2") return gguf_gpt2_config(f);
  COLOSSAL_CHECK(arch == "llama" || arch == "qwen2" || arch == "qwen3", "[gguf] ", f.path(),
                 ": general.architecture is '", arch, "'; this version reads 'llama', 'qwen2', 'qwen3' and 'gpt2' "
                 "files");
  const std::string k = arch + ".";
  COLOSSAL_CHECK(f.get_int(k + "expert_count", 0) == 0, "[gguf] ", f.path(), ": ", k, "expert_count is ",
                 f.get_int(k + "expert_count", 0), "; mixtures of experts are not read from GGUF in this version");
  if (f.has(k + "rope.scaling.type")) {
    const auto scaling = f.get_string(k + "rope.scaling.type");
    COLOSSAL_CHECK(scaling == "none", "[gguf] ", f.path(), ": ", k, "rope.scaling.type is '", scaling,
                   "'; rope scaling is not read from GGUF in this version");
  }
  LlamaConfig c;
  c.model_type = arch;
  c.num_hidden_layers = f.get_int(k + "block_count");
  c.hidden_size = f.get_int(k + "embedding_length");
  c.intermediate_size = f.get_int(k + "feed_forward_length");
  c.num_attention_heads = f.get_int(k + "attention.head_count");
  c.num_key_value_heads = f.get_int(k + "attention.head_count_kv", c.num_attention_heads);
  c.max_position_embeddings = f.get_int(k + "context_length");
  c.rope_theta = f.get_float(k + "rope.freq_base", 10000.0);
  c.rms_norm_eps = f.get_float(k + "attention.layer_norm_rms_epsilon", 1e-5);
  // Biases and q/k norms as the tensors of the first block have them.
  const bool qkv_bias = f.find("blk.0.attn_q.bias") != nullptr, o_bias = f.find("blk.0.attn_output.bias") != nullptr;
  COLOSSAL_CHECK(!o_bias || qkv_bias, "[gguf] ", f.path(), ": blk.0.attn_output.bias without blk.0.attn_q.bias");
  c.attention_bias = o_bias;
  c.qkv_bias = qkv_bias && !o_bias;
  c.qk_norm = f.find("blk.0.attn_q_norm.weight") != nullptr;
  COLOSSAL_CHECK(!c.qk_norm || arch == "qwen3", "[gguf] ", f.path(), ": ", arch, " with attn_q_norm tensors");
  const auto& embed = f.tensor("token_embd.weight");
  COLOSSAL_CHECK(embed.shape.size() == 2 && embed.shape[0] == c.hidden_size, "[gguf] ", f.path(),
                 ": token_embd.weight's ggml shape does not start with embedding_length ", c.hidden_size);
  c.vocab_size = embed.shape[1];
  c.tie_word_embeddings = f.find("output.weight") == nullptr;
  const auto& q = f.tensor("blk.0.attn_q.weight");
  COLOSSAL_CHECK(q.shape.size() == 2 && q.shape[1] % c.num_attention_heads == 0, "[gguf] ", f.path(),
                 ": blk.0.attn_q.weight's rows are not a multiple of head_count ", c.num_attention_heads);
  const int64_t head_dim = q.shape[1] / c.num_attention_heads;
  if (head_dim != c.hidden_size / c.num_attention_heads) c.head_dim = head_dim;
  const int64_t rot = f.get_int(k + "rope.dimension_count", head_dim);
  COLOSSAL_CHECK(rot == head_dim, "[gguf] ", f.path(), ": ", k, "rope.dimension_count is ", rot, ", the head size ",
                 head_dim, "; partial rotary embeddings are not read in this version");
  COLOSSAL_CHECK(c.num_hidden_layers >= 1 && c.num_key_value_heads >= 1 &&
                     c.num_attention_heads % c.num_key_value_heads == 0 && head_dim % 2 == 0,
                 "[gguf] ", f.path(), ": inconsistent hyper-parameters (", c.num_hidden_layers, " layers, ",
                 c.num_attention_heads, " heads over ", c.num_key_value_heads, " kv heads of ", head_dim, ")");
  read_special_ids(f, c);
  return c;
}

std::string gguf_sentencepiece_proto(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  COLOSSAL_CHECK(model == "llama", "[gguf] ", f.path(), ": tokenizer.ggml.model is '", model,
                 "'; this version reads SentencePiece vocabularies ('llama')");
  const auto& tokens = f.get_array("tokenizer.ggml.tokens");
  const std::vector<checkpoint::GgufValue> none;
  const auto& scores = f.has("tokenizer.ggml.scores") ? f.get_array("tokenizer.ggml.scores") : none;
  const auto& types = f.has("tokenizer.ggml.token_type") ? f.get_array("tokenizer.ggml.token_type") : none;
  COLOSSAL_CHECK((scores.empty() || scores.size() == tokens.size()) && (types.empty() || types.size() == tokens.size()),
                 "[gguf] ", f.path(), ": ", tokens.size(), " tokens but ", scores.size(), " scores and ", types.size(),
                 " token types");
  std::string proto;
  bool bytes = false;
  // SentencePiece needs its unknown piece typed as such; llama.cpp's converter may mark it a
  // control token (it takes the types of Hugging Face's added tokens).
  const int64_t unk = f.get_int("tokenizer.ggml.unknown_token_id", 0);
  for (size_t i = 0; i < tokens.size(); ++i) {
    COLOSSAL_CHECK(tokens[i].kind == checkpoint::GgufValue::Kind::kString, "[gguf] ", f.path(), ": token ", i,
                   " is not a string");
    // GGUF token types are SentencePiece's (1 normal, 2 unknown, 3 control, 4 user defined,
    // 5 unused, 6 byte).
    int64_t type = types.empty() ? 1 : types[i].i;
    if (static_cast<int64_t>(i) == unk) type = 2;
    else if (type == 2) type = 3;  // one unknown piece only
    COLOSSAL_CHECK(type >= 1 && type <= 6, "[gguf] ", f.path(), ": token ", i, " has type ", type, " (expected 1..6)");
    bytes = bytes || type == 6;
    std::string piece;
    field_bytes(piece, 1, tokens[i].s);
    field_float(piece, 2, scores.empty() ? 0.0f : static_cast<float>(scores[i].kind == checkpoint::GgufValue::Kind::kFloat ? scores[i].f : scores[i].i));
    field_varint(piece, 3, static_cast<uint64_t>(type));
    field_bytes(proto, 1, piece);
  }
  auto id = [&](const char* key, int64_t fallback) { return f.get_int(key, fallback); };
  COLOSSAL_CHECK(unk >= 0 && unk < static_cast<int64_t>(tokens.size()), "[gguf] ", f.path(),
                 ": tokenizer.ggml.unknown_token_id ", unk, " is outside the ", tokens.size(), " tokens");
  std::string trainer;
  field_varint(trainer, 3, 2);  // model_type BPE: pieces merged by score, as llama.cpp's SPM tokenizer does
  field_varint(trainer, 4, tokens.size());
  field_varint(trainer, 35, bytes ? 1 : 0);  // byte_fallback
  // Special ids as int32 varints (-1 is ten bytes of two's complement).
  field_varint(trainer, 40, static_cast<uint64_t>(id("tokenizer.ggml.unknown_token_id", 0)));
  field_varint(trainer, 41, static_cast<uint64_t>(id("tokenizer.ggml.bos_token_id", 1)));
  field_varint(trainer, 42, static_cast<uint64_t>(id("tokenizer.ggml.eos_token_id", 2)));
  field_varint(trainer, 43, static_cast<uint64_t>(id("tokenizer.ggml.padding_token_id", -1)));
  field_bytes(proto, 2, trainer);
  std::string normalizer;
  field_bytes(normalizer, 1, "identity");  // GGUF keeps no normalization rules; llama.cpp applies none
  field_varint(normalizer, 3, f.get_bool("tokenizer.ggml.add_space_prefix", true) ? 1 : 0);
  field_varint(normalizer, 4, 0);  // remove_extra_whitespaces
  field_varint(normalizer, 5, 1);  // escape_whitespaces: ' ' becomes '▁'
  field_bytes(proto, 3, normalizer);
  return proto;
}

Tokenizer gguf_tokenizer(const GgufFile& f) {
  return Tokenizer::from_serialized(gguf_sentencepiece_proto(f), f.path());
}


std::unique_ptr<text::Tokenizer> gguf_text_tokenizer(const GgufFile& f) {
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "llama") return std::make_unique<Tokenizer>(gguf_tokenizer(f));
  COLOSSAL_CHECK(model == "gpt2", "[gguf] ", f.path(), ": tokenizer.ggml.model is '", model,
                 "'; this version reads 'llama' (SentencePiece) and 'gpt2' (byte-level BPE) vocabularies");
  const std::string pre = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "gpt-2";
  auto split = gguf_pre_splits().find(pre == "default" ? "gpt-2" : pre == "llama3" || pre == "llama-v3" ? "llama-bpe" : pre);
  if (split == gguf_pre_splits().end()) {
    std::string known;
    for (const auto& [name, s] : gguf_pre_splits()) known += (known.empty() ? "" : ", ") + name;
    COLOSSAL_FAIL("[gguf] ", f.path(), ": tokenizer.ggml.pre '", pre, "' is not supported (supported: ", known, ")");
  }
  const auto& tokens = f.get_array("tokenizer.ggml.tokens");
  const auto& merges = f.get_array("tokenizer.ggml.merges");
  const std::vector<checkpoint::GgufValue> none;
  const auto& types = f.has("tokenizer.ggml.token_type") ? f.get_array("tokenizer.ggml.token_type") : none;
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object(), added = nlohmann::ordered_json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    COLOSSAL_CHECK(tokens[i].kind == checkpoint::GgufValue::Kind::kString, "[gguf] ", f.path(), ": token ", i, " is not a string");
    vocab[tokens[i].s] = i;
    const int64_t type = types.empty() ? 1 : types[i].i;  // 3: control (special), 4: user defined
    if (type == 3 || type == 4)
      added.push_back({{"id", i}, {"content", tokens[i].s}, {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                       {"normalized", false}, {"special", type == 3}});
  }
  nlohmann::ordered_json merge_list = nlohmann::ordered_json::array();
  for (const auto& m : merges) merge_list.push_back(m.s);
  nlohmann::ordered_json j;
  j["added_tokens"] = added;
  nlohmann::ordered_json splits = nlohmann::ordered_json::array();
  for (const char* regex : split->second.regexes)
    splits.push_back({{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}});
  splits.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", splits}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["model"] = {{"type", "BPE"}, {"ignore_merges", split->second.ignore_merges}, {"vocab", vocab}, {"merges", merge_list}};
  text::TokenizerConfig config;
  auto name_of = [&](const char* key) -> std::string {
    if (!f.has(key)) return "";
    const int64_t id = f.get_int(key);
    COLOSSAL_CHECK(id >= 0 && id < static_cast<int64_t>(tokens.size()), "[gguf] ", f.path(), ": ", key, " ", id,
                   " is outside the ", tokens.size(), " tokens");
    return tokens[static_cast<size_t>(id)].s;
  };
  config.bos_token = name_of("tokenizer.ggml.bos_token_id");
  config.eos_token = name_of("tokenizer.ggml.eos_token_id");
  config.pad_token = name_of("tokenizer.ggml.padding_token_id");
  if (f.has("tokenizer.chat_template")) config.chat_template = f.get_string("tokenizer.chat_template");
  // BOS in front when the file says so (llama.cpp's add_bos_token), as a post-processor would.
  if (f.get_bool("tokenizer.ggml.add_bos_token", false) && !config.bos_token.empty()) {
    const int64_t bos = f.get_int("tokenizer.ggml.bos_token_id");
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", config.bos_token}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                           {"special_tokens", {{config.bos_token, {{"id", config.bos_token}, {"ids", {bos}}, {"tokens", {config.bos_token}}}}}}};
  }
  return std::make_unique<text::HfTokenizer>(j.dump(), f.path(), config);
}

WeightFormat gguf_weight_format(const GgufFile& f) {
  const auto& t = f.tensor(f.find("blk.0.attn_q.weight") ? "blk.0.attn_q.weight" : "blk.0.attn_qkv.weight");
  if (t.type == type_id(GgmlType::kF32)) return WeightFormat::kF32;
  const auto native = native_format(t.type);
  COLOSSAL_CHECK(native.has_value(), unsupported_type(f, t));
  return *native;
}

std::shared_ptr<LlamaInference> LlamaInference::load_gguf(const std::string& path, Options options) {
  auto file = GgufFile::open(path);
  const GgufFile& f = *file;
  LlamaConfig c = gguf_llama_config(f);
  // As a safetensors checkpoint is: NaN or infinite weights (or block scales) are refused by name.
  for (const auto& t : f.tensors()) {
    const int64_t bad = checkpoint::first_non_finite(t);
    COLOSSAL_CHECK(bad < 0, "[gguf] ", path, ": tensor '", t.name, "' (", checkpoint::ggml_type_name(t.type),
                   ") holds a NaN or infinite value at ",
                   checkpoint::ggml_type_bytes(t.type, 1) > 0 ? "element " : "block ", bad);
  }
  const bool file_format = !options.weights;
  if (file_format) {  // the file's format, with the KV cache --dtype of that name would have
    const bool reuse = options.reuse_packed;
    const auto kv_cache = options.kv_cache;
    options = Options::named(kernels::cpu::to_string(gguf_weight_format(f)));
    options.reuse_packed = reuse;
    options.kv_cache = kv_cache;
  }
  std::shared_ptr<LlamaInference> m(new LlamaInference(c, options));
  // The file's own formats, tensor by tensor, unless another format was asked for (a K-quant asked
  // for by name keeps them too: the mixes are per tensor).
  const MatrixFormat format{*options.weights, file_format || kernels::cpu::is_kquant(*options.weights)};
  const int64_t hidden = c.hidden_size, d = c.resolved_head_dim(), heads = c.num_attention_heads,
                kv = c.num_key_value_heads, ffn = c.intermediate_size;
  if (c.model_type == "gpt2") {
    m->load_gguf_gpt2(f, format.format, format.keep_native);
    return m;
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer x;
    // llama.cpp's converter interleaves LLaMA's q/k rows (weights and biases); Qwen's it keeps.
    const bool interleaved = c.model_type == "llama";
    auto q = matrix(f, p + "attn_q.weight", format, heads * d, hidden);
    auto k = matrix(f, p + "attn_k.weight", format, kv * d, hidden);
    if (interleaved) {
      q = q.permute_rows(unpermute_rotary(heads, d));
      k = k.permute_rows(unpermute_rotary(kv, d));
    }
    x.qkv = PackedLinear::concat_rows({q, k, matrix(f, p + "attn_v.weight", format, kv * d, hidden)});
    if (c.q_k_v_bias()) {
      auto bias = [&](const char* name, int64_t n, int64_t h) {
        auto b = norm_vector(f, p + name, n);
        if (!interleaved || h == 0) return b;
        const auto order = unpermute_rotary(h, d);
        return b.index_select(0, at::tensor(order, at::kLong)).contiguous();
      };
      x.qkv_bias = at::cat({bias("attn_q.bias", heads * d, heads), bias("attn_k.bias", kv * d, kv),
                            bias("attn_v.bias", kv * d, 0)});
    }
    if (c.attention_bias) x.o_bias = norm_vector(f, p + "attn_output.bias", hidden);
    if (c.qk_norm) {
      x.q_norm = norm_vector(f, p + "attn_q_norm.weight", d);
      x.k_norm = norm_vector(f, p + "attn_k_norm.weight", d);
    }
    x.o = matrix(f, p + "attn_output.weight", format, hidden, heads * d);
    x.gate_up = PackedLinear::concat_rows(
        {matrix(f, p + "ffn_gate.weight", format, ffn, hidden), matrix(f, p + "ffn_up.weight", format, ffn, hidden)});
    x.down = matrix(f, p + "ffn_down.weight", format, hidden, ffn);
    x.input_norm = norm_vector(f, p + "attn_norm.weight", hidden);
    x.post_norm = norm_vector(f, p + "ffn_norm.weight", hidden);
    m->layers_.push_back(std::move(x));
  }
  m->embed_ = matrix(f, "token_embd.weight", format, c.vocab_size, hidden);
  m->norm_ = norm_vector(f, "output_norm.weight", hidden);
  m->lm_head_ = c.tie_word_embeddings ? m->embed_ : matrix(f, "output.weight", format, c.vocab_size, hidden);
  return m;
}

void LlamaInference::load_gguf_gpt2(const GgufFile& f, WeightFormat weights, bool keep_native) {
  const auto& c = config_;
  const MatrixFormat format{weights, keep_native};
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    Layer x;
    // The converter transposed GPT-2's Conv1D weights: rows are output features (q, k, v).
    x.qkv = matrix(f, p + "attn_qkv.weight", format, 3 * hidden, hidden);
    x.qkv_bias = norm_vector(f, p + "attn_qkv.bias", 3 * hidden);
    x.o = matrix(f, p + "attn_output.weight", format, hidden, hidden);
    x.o_bias = norm_vector(f, p + "attn_output.bias", hidden);
    x.gate_up = matrix(f, p + "ffn_up.weight", format, ffn, hidden);
    x.up_bias = norm_vector(f, p + "ffn_up.bias", ffn);
    x.down = matrix(f, p + "ffn_down.weight", format, hidden, ffn);
    x.down_bias = norm_vector(f, p + "ffn_down.bias", hidden);
    x.input_norm = norm_vector(f, p + "attn_norm.weight", hidden);
    x.input_norm_bias = norm_vector(f, p + "attn_norm.bias", hidden);
    x.post_norm = norm_vector(f, p + "ffn_norm.weight", hidden);
    x.post_norm_bias = norm_vector(f, p + "ffn_norm.bias", hidden);
    layers_.push_back(std::move(x));
  }
  embed_ = matrix(f, "token_embd.weight", format, c.vocab_size, hidden);
  positions_ = norm_vector(f, "position_embd.weight", c.max_position_embeddings * hidden)
                   .view({c.max_position_embeddings, hidden});
  norm_ = norm_vector(f, "output_norm.weight", hidden);
  norm_bias_ = norm_vector(f, "output_norm.bias", hidden);
  lm_head_ = c.tie_word_embeddings ? embed_ : matrix(f, "output.weight", format, c.vocab_size, hidden);
}

}  // namespace colossal::llama
