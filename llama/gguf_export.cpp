#include "llama/gguf_export.h"

#include <ATen/ATen.h>
#include <sys/stat.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/checkpoint/gguf_writer.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "kernels/cpu/kquants.h"
#include "kernels/cpu/matvec.h"
#include "llama/config.h"
#include "llama/gguf_vocab_export.h"

namespace colossal::llama {

namespace {

using checkpoint::GgmlType;

namespace kc = kernels::cpu;

struct OutType {
  const char* name;
  GgmlType matrix;     // the matrices' type
  uint32_t file_type;  // general.file_type (llama.cpp's llama_ftype)
  bool more_bits = false;  // the _M mixes: Q6_K for some value and down projections
};
constexpr OutType kOutTypes[] = {{"f32", GgmlType::kF32, 0},       {"f16", GgmlType::kF16, 1},
                                 {"bf16", GgmlType::kBF16, 32},    {"q8_0", GgmlType::kQ8_0, 7},
                                 {"q4_0", GgmlType::kQ4_0, 2},     {"q4_k_m", GgmlType::kQ4_K, 15, true},
                                 {"q5_k_m", GgmlType::kQ5_K, 17, true}, {"q6_k", GgmlType::kQ6_K, 18}};

const OutType& out_type(const std::string& name) {
  for (const auto& t : kOutTypes)
    if (name == t.name) return t;
  COLOSSAL_FAIL("[gguf] --outtype '", name, "': expected f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m or q6_k");
}

bool is_k_type(GgmlType t) { return t == GgmlType::kQ4_K || t == GgmlType::kQ5_K || t == GgmlType::kQ6_K; }

// What a matrix is in the K-quant mixes, as llama-quantize decides it without an importance matrix.
enum class Role { kOther, kOutput, kValue, kDown };

// The layers that get more bits in the _M mixes: the first and last eighth, and every third
// between (llama-quantize's use_more_bits).
bool more_bits(int64_t layer, int64_t layers) {
  return layer < layers / 8 || layer >= 7 * layers / 8 || (layer - layers / 8) % 3 == 2;
}

// A matrix's type: `type`'s, with the K-quant mixes' choices (the head in Q6_K, and with more_bits
// the value and down projections of the layers above). Rows that are not whole super-blocks of
// 256 take q8_0 (llama-quantize takes q5_0/q5_1, which this project does not read), rows that are
// not whole blocks of 32 f16.
GgmlType matrix_type(const OutType& type, Role role, int64_t layer, int64_t layers, int64_t cols) {
  GgmlType t = type.matrix;
  if (is_k_type(t)) {
    if (role == Role::kOutput) t = GgmlType::kQ6_K;
    else if (type.more_bits && (role == Role::kValue || role == Role::kDown) && more_bits(layer, layers))
      t = GgmlType::kQ6_K;
    if (cols % kc::kSuperBlock != 0) t = GgmlType::kQ8_0;
  }
  if (checkpoint::ggml_type_bytes(static_cast<uint32_t>(t), cols) < 0) t = GgmlType::kF16;
  return t;
}

std::vector<uint8_t> bytes_of(const at::Tensor& t) {
  auto c = t.contiguous();
  std::vector<uint8_t> out(c.nbytes());
  std::memcpy(out.data(), c.const_data_ptr(), out.size());
  return out;
}

// A [rows, cols] fp32 matrix in `type`: our own q8_0/q4_0 rounding (llama.cpp's reference
// quantization: per block of 32, max|x|/127, or the extreme / -8 for q4_0), then its blocks; the
// K-quants through kernels/cpu's quantizer.
std::vector<uint8_t> matrix_bytes(const at::Tensor& w, GgmlType type) {
  switch (type) {
    case GgmlType::kF32: return bytes_of(w);
    case GgmlType::kF16: return bytes_of(w.to(at::kHalf));
    case GgmlType::kBF16: return bytes_of(w.to(at::kBFloat16));
    default: break;
  }
  const int64_t rows = w.size(0), cols = w.size(1);
  if (is_k_type(type)) {  // rows of whole super-blocks: the matrix is one run of them
    const auto format = type == GgmlType::kQ4_K   ? kc::WeightFormat::kQ4K
                        : type == GgmlType::kQ5_K ? kc::WeightFormat::kQ5K
                                                  : kc::WeightFormat::kQ6K;
    const int64_t row_bytes = cols / kc::kSuperBlock * kc::kquant_block_bytes(format);
    std::vector<uint8_t> out(static_cast<size_t>(rows * row_bytes));
    const float* src = w.const_data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
      kc::quantize_kquant(format, src + b * cols, (e - b) * cols, out.data() + b * row_bytes);
    });
    return out;
  }
  const auto format = type == GgmlType::kQ8_0 ? kc::WeightFormat::kQ8 : kc::WeightFormat::kQ4;
  std::vector<uint8_t> data(static_cast<size_t>(kc::data_bytes(format, rows, cols)));
  std::vector<uint16_t> scales(static_cast<size_t>(kc::scale_count(format, rows, cols)));
  kc::pack_rows(w.const_data_ptr<float>(), rows, cols, format, data.data(), scales.data());
  std::vector<uint8_t> out(static_cast<size_t>(checkpoint::ggml_type_bytes(static_cast<uint32_t>(type), rows * cols)));
  kc::to_ggml_rows({format, rows, cols, data.data(), scales.data()}, 0, rows, out.data());
  return out;
}

// llama.cpp's rotary layout for LLaMA's query/key rows: each head's (i, i + d/2) pairs become
// rows (2i, 2i + 1): row h*d + 2i + j of the file is row h*d + j*d/2 + i of the checkpoint.
at::Tensor interleave_rotary(const at::Tensor& w, int64_t heads) {
  const int64_t d = w.size(0) / heads;
  auto shape = w.sizes().vec();
  std::vector<int64_t> split = {heads, 2, d / 2};
  for (size_t i = 1; i < shape.size(); ++i) split.push_back(shape[i]);
  return w.reshape(split).transpose(1, 2).reshape(shape).contiguous();
}

}  // namespace

void GgufExportOptions::validate() const { (void)out_type(outtype); }

GgufExportResult export_gguf(const std::string& dir, const std::string& out_path, const GgufExportOptions& options) {
  options.validate();
  const auto& type = out_type(options.outtype);
  const LlamaConfig c = LlamaConfig::from_json_file(dir + "/config.json");
  const std::string family = c.model_type;
  COLOSSAL_CHECK(family == "llama" || family == "mistral" || family == "qwen2" || family == "qwen3", "[gguf] ", dir,
                 ": model_type '", family, "'; this version exports llama, mistral, qwen2 and qwen3 models "
                 "(the LLaMA tensor layout)");
  COLOSSAL_CHECK(c.num_local_experts == 0, "[gguf] ", dir, ": a mixture of experts (", c.num_local_experts,
                 " experts) is not exported in this version");
  COLOSSAL_CHECK(c.rope_scaling.type.empty(), "[gguf] ", dir, ": rope_scaling '", c.rope_scaling.type,
                 "' is not exported in this version");
  COLOSSAL_CHECK(!c.attention_bias || family == "qwen3", "[gguf] ", dir, ": attention_bias on ", family,
                 " is not exported in this version");
  // Mistral is LLaMA to llama.cpp (its converter writes "llama"); Qwen keeps its rotary halves.
  const std::string arch = family == "mistral" ? "llama" : family;
  const bool interleave = arch == "llama";
  const int64_t d = c.resolved_head_dim();

  checkpoint::GgufWriter out;
  out.add_string("general.architecture", arch);
  out.add_string("general.type", "model");
  const auto slash = dir.find_last_not_of('/');
  const std::string trimmed = dir.substr(0, slash + 1);
  out.add_string("general.name", trimmed.substr(trimmed.rfind('/') + 1));
  out.add_u32("general.file_type", type.file_type);
  out.add_u32("general.quantization_version", 2);
  const std::string k = arch + ".";
  out.add_u32(k + "context_length", static_cast<uint32_t>(c.max_position_embeddings));
  out.add_u32(k + "embedding_length", static_cast<uint32_t>(c.hidden_size));
  out.add_u32(k + "block_count", static_cast<uint32_t>(c.num_hidden_layers));
  out.add_u32(k + "feed_forward_length", static_cast<uint32_t>(c.intermediate_size));
  out.add_u32(k + "rope.dimension_count", static_cast<uint32_t>(d));
  out.add_u32(k + "attention.head_count", static_cast<uint32_t>(c.num_attention_heads));
  out.add_u32(k + "attention.head_count_kv", static_cast<uint32_t>(c.num_key_value_heads));
  out.add_u32(k + "attention.key_length", static_cast<uint32_t>(d));
  out.add_u32(k + "attention.value_length", static_cast<uint32_t>(d));
  out.add_f32(k + "attention.layer_norm_rms_epsilon", static_cast<float>(c.rms_norm_eps));
  out.add_f32(k + "rope.freq_base", static_cast<float>(c.rope_theta));
  out.add_u32(k + "vocab_size", static_cast<uint32_t>(c.vocab_size));
  add_gguf_vocabulary(out, dir, c);
  // generation_config.json's sampling defaults, under the keys llama.cpp's converter gives them.
  if (fs::exists(dir + "/generation_config.json")) {
    const auto g = nlohmann::json::parse(fs::read_file(dir + "/generation_config.json"), nullptr, false);
    if (g.is_object()) {
      if (g.contains("top_k") && g["top_k"].is_number_integer())
        out.add_i32("general.sampling.top_k", g["top_k"].get<int32_t>());
      for (const auto& [hf_key, gguf_key] : {std::pair{"top_p", "top_p"}, {"min_p", "min_p"}, {"temperature", "temp"},
                                            {"repetition_penalty", "penalty_repeat"}})
        if (g.contains(hf_key) && g[hf_key].is_number())
          out.add_f32(std::string("general.sampling.") + gguf_key, g[hf_key].get<float>());
    }
  }

  auto reader = std::make_shared<checkpoint::CheckpointReader>(dir);
  auto load = [reader, dir](const std::string& name) {
    COLOSSAL_CHECK(reader->contains(name), "[gguf] ", dir, ": the checkpoint has no tensor '", name, "'");
    return reader->view(name).to(at::kFloat).contiguous();
  };
  // A 2-d weight in its type (matrix_type: the mixes' choices, fallbacks where blocks do not fit its rows).
  auto matrix = [&](const std::string& gguf, const std::string& hf, int64_t permute_heads = 0,
                    Role role = Role::kOther, int64_t layer = 0) {
    const auto& info = reader->info(hf);
    COLOSSAL_CHECK(info.shape.size() == 2, "[gguf] ", dir, ": '", hf, "' is not a matrix");
    const GgmlType t = matrix_type(type, role, layer, c.num_hidden_layers, info.shape[1]);
    out.add_tensor(gguf, t, {info.shape[1], info.shape[0]}, [=]() {
      auto w = load(hf);
      if (permute_heads) w = interleave_rotary(w, permute_heads);
      return matrix_bytes(w, t);
    });
  };
  auto vector = [&](const std::string& gguf, const std::string& hf, int64_t permute_heads = 0) {
    const auto& info = reader->info(hf);
    out.add_tensor(gguf, GgmlType::kF32, {info.shape.empty() ? 1 : info.shape[0]}, [=]() {
      auto v = load(hf);
      if (permute_heads) v = interleave_rotary(v, permute_heads);
      return bytes_of(v);
    });
  };
  // Tied, the embedding is also the head, and takes the head's type.
  matrix("token_embd.weight", "model.embed_tokens.weight", 0, c.tie_word_embeddings ? Role::kOutput : Role::kOther);
  const int64_t q_heads = interleave ? c.num_attention_heads : 0, k_heads = interleave ? c.num_key_value_heads : 0;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string g = "blk." + std::to_string(l) + ".", h = "model.layers." + std::to_string(l) + ".";
    vector(g + "attn_norm.weight", h + "input_layernorm.weight");
    matrix(g + "attn_q.weight", h + "self_attn.q_proj.weight", q_heads);
    matrix(g + "attn_k.weight", h + "self_attn.k_proj.weight", k_heads);
    matrix(g + "attn_v.weight", h + "self_attn.v_proj.weight", 0, Role::kValue, l);
    if (c.q_k_v_bias()) {
      vector(g + "attn_q.bias", h + "self_attn.q_proj.bias", q_heads);
      vector(g + "attn_k.bias", h + "self_attn.k_proj.bias", k_heads);
      vector(g + "attn_v.bias", h + "self_attn.v_proj.bias");
    }
    if (c.qk_norm) {
      vector(g + "attn_q_norm.weight", h + "self_attn.q_norm.weight");
      vector(g + "attn_k_norm.weight", h + "self_attn.k_norm.weight");
    }
    matrix(g + "attn_output.weight", h + "self_attn.o_proj.weight");
    if (c.attention_bias) vector(g + "attn_output.bias", h + "self_attn.o_proj.bias");
    vector(g + "ffn_norm.weight", h + "post_attention_layernorm.weight");
    matrix(g + "ffn_gate.weight", h + "mlp.gate_proj.weight");
    matrix(g + "ffn_up.weight", h + "mlp.up_proj.weight");
    matrix(g + "ffn_down.weight", h + "mlp.down_proj.weight", 0, Role::kDown, l);
  }
  vector("output_norm.weight", "model.norm.weight");
  if (!c.tie_word_embeddings) matrix("output.weight", "lm_head.weight", 0, Role::kOutput);
  out.write(out_path);
  GgufExportResult result;
  result.tensors = static_cast<int64_t>(out.tensor_count());
  struct stat st {};
  if (::stat(out_path.c_str(), &st) == 0) result.bytes = st.st_size;
  return result;
}

}  // namespace colossal::llama
