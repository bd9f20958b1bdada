// LlamaConfig <-> Hugging Face config.json, and the rotary frequencies with rope_scaling.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/common/check.h"
#include "llama/config.h"

namespace colossal::llama {
namespace {

using json = nlohmann::json;

// Fields transformers writes that do not change this model (accepted silently).
const std::set<std::string> kIgnored = {
    "architectures", "transformers_version", "torch_dtype", "use_cache", "pretraining_tp",
    "attention_dropout", "mlp_bias", "_name_or_path", "dtype", "output_attentions",
    "output_hidden_states", "return_dict", "model_type", "hidden_act"};

}  // namespace

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& origin,
                                        std::vector<std::string>* unknown, bool require_shape) {
  auto js = json::parse(text, nullptr, /*allow_exceptions=*/false);
  COLOSSAL_CHECK(!js.is_discarded() && js.is_object(), "[llama] ", origin, ": not a JSON object");
  // transformers would fill a missing size from LlamaConfig's 7B defaults and then report
  // hundreds of mismatched tensors; the field itself is the error.
  if (require_shape) {
    for (const char* key : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                            "num_attention_heads"}) {
      COLOSSAL_CHECK(js.contains(key) && !js[key].is_null(), "[llama] ", origin, ": field '", key,
                     "' is missing (a model's config.json must give vocab_size, hidden_size, intermediate_size, "
                     "num_hidden_layers and num_attention_heads)");
    }
  }
  std::set<std::string> used;
  LlamaConfig c;
  auto read_int = [&](const char* key, int64_t& out) {
    if (!js.contains(key)) return;
    used.insert(key);
    if (js[key].is_null()) return;
    COLOSSAL_CHECK(js[key].is_number_integer(), "[llama] ", origin, ": field '", key,
                   "' expected an integer, found ", js[key].dump());
    out = js[key].get<int64_t>();
  };
  auto read_double = [&](const char* key, double& out) {
    if (!js.contains(key)) return;
    used.insert(key);
    if (js[key].is_null()) return;
    COLOSSAL_CHECK(js[key].is_number(), "[llama] ", origin, ": field '", key,
                   "' expected a number, found ", js[key].dump());
    out = js[key].get<double>();
  };
  auto read_bool = [&](const char* key, bool& out) {
    if (!js.contains(key)) return;
    used.insert(key);
    if (js[key].is_null()) return;
    COLOSSAL_CHECK(js[key].is_boolean(), "[llama] ", origin, ": field '", key,
                   "' expected true or false, found ", js[key].dump());
    out = js[key].get<bool>();
  };
  if (js.contains("model_type")) {
    const auto& t = js["model_type"];
    static const std::set<std::string> kRefused = {"qwen2_moe", "qwen3_moe"};
    COLOSSAL_CHECK(!(t.is_string() && kRefused.count(t.get<std::string>())), "[llama] ", origin, ": model_type ",
                   t.dump(), ": mixtures of experts with shared experts (Qwen-MoE) are not supported; the dense "
                   "qwen2 and qwen3 are");
    COLOSSAL_CHECK(t == "llama" || t == "mistral" || t == "mixtral" || t == "qwen2" || t == "qwen3", "[llama] ", origin,
                   ": model_type is ", t.dump(), ", expected \"llama\", \"mistral\", \"mixtral\", \"qwen2\" or \"qwen3\"");
    c.model_type = t.get<std::string>();
  }
  const std::string family = c.model_type;
  // Qwen2 always has q/k/v biases (no field says so); Qwen3 always normalises q and k per head.
  c.qkv_bias = family == "qwen2";
  c.qk_norm = family == "qwen3";
  if (js.contains("hidden_act")) {
    COLOSSAL_CHECK(js["hidden_act"] == "silu", "[llama] ", origin, ": ", family, ": hidden_act is ",
                   js["hidden_act"].dump(), "; this model implements \"silu\" (SwiGLU)");
  }
  // Qwen's sliding-window switches: off is plain causal attention everywhere (sliding_window and
  // max_window_layers then mean nothing); on is refused by name until windows are implemented.
  bool qwen_window = false;
  if (family == "qwen2" || family == "qwen3") {
    read_bool("use_sliding_window", qwen_window);
    COLOSSAL_CHECK(!qwen_window, "[llama] ", origin, ": ", family,
                   ": use_sliding_window true is not supported (sliding-window layers)");
    int64_t unused = 0;
    read_int("max_window_layers", unused);
  }
  if (js.contains("layer_types")) {  // transformers 5: one attention kind per layer
    used.insert("layer_types");
    const auto& types = js["layer_types"];
    COLOSSAL_CHECK(types.is_array(), "[llama] ", origin, ": field 'layer_types' expected a list, found ", types.dump());
    for (size_t i = 0; i < types.size(); ++i)
      COLOSSAL_CHECK(types[i] == "full_attention", "[llama] ", origin, ": ", family, ": layer_types[", i, "] is ",
                     types[i].dump(), "; only \"full_attention\" layers are supported");
  }
  read_int("vocab_size", c.vocab_size);
  read_int("hidden_size", c.hidden_size);
  read_int("intermediate_size", c.intermediate_size);
  read_int("num_hidden_layers", c.num_hidden_layers);
  read_int("num_attention_heads", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;  // transformers' default
  read_int("num_key_value_heads", c.num_key_value_heads);
  read_int("head_dim", c.head_dim);
  read_double("rms_norm_eps", c.rms_norm_eps);
  read_double("rope_theta", c.rope_theta);
  read_int("max_position_embeddings", c.max_position_embeddings);
  read_bool("tie_word_embeddings", c.tie_word_embeddings);
  if (family != "qwen2") read_bool("attention_bias", c.attention_bias);
  read_double("initializer_range", c.initializer_range);
  read_int("bos_token_id", c.bos_token_id);
  if (js.contains("eos_token_id") && js["eos_token_id"].is_array()) {  // Llama 3.x: several ids end a turn
    used.insert("eos_token_id");
    for (const auto& v : js["eos_token_id"]) {
      COLOSSAL_CHECK(v.is_number_integer(), "[llama] ", origin, ": field 'eos_token_id' expected integers, found ",
                     js["eos_token_id"].dump());
      c.eos_token_ids.push_back(v.get<int64_t>());
    }
    COLOSSAL_CHECK(!c.eos_token_ids.empty(), "[llama] ", origin, ": field 'eos_token_id' is an empty list");
    c.eos_token_id = c.eos_token_ids.front();
  } else {
    read_int("eos_token_id", c.eos_token_id);
  }
  read_int("pad_token_id", c.pad_token_id);
  read_int("num_local_experts", c.num_local_experts);
  read_int("num_experts_per_tok", c.num_experts_per_tok);
  read_double("router_aux_loss_coef", c.router_aux_loss_coef);
  read_bool("output_router_logits", c.output_router_logits);
  read_double("router_jitter_noise", c.router_jitter_noise);
  read_double("router_z_loss_coef", c.router_z_loss_coef);
  read_double("capacity_factor", c.capacity_factor);
  COLOSSAL_CHECK(family != "mixtral" || c.num_local_experts > 0, "[llama] ", origin,
                 ": model_type \"mixtral\" needs num_local_experts > 0");
  COLOSSAL_CHECK(c.num_local_experts == 0 || family == "mixtral" || family == "llama", "[llama] ", origin, ": ", family,
                 ": num_local_experts is not a field of this family");
  // Mistral and Mixtral write sliding_window: null is plain causal attention, a number the window.
  if (js.contains("sliding_window") && (family == "qwen2" || family == "qwen3")) {
    used.insert("sliding_window");  // without use_sliding_window (refused above) it is not applied
  } else if (js.contains("sliding_window") && (family == "mistral" || family == "mixtral")) {
    used.insert("sliding_window");
    const auto& w = js["sliding_window"];
    COLOSSAL_CHECK(w.is_null() || (w.is_number_integer() && w.get<int64_t>() > 0), "[llama] ", origin,
                   ": field 'sliding_window' expected null or a positive integer, found ", w.dump());
    // A window as long as the context changes nothing: kept as none.
    if (!w.is_null() && w.get<int64_t>() < c.max_position_embeddings) c.sliding_window = w.get<int64_t>();
  }
  // transformers 4 writes rope_theta + rope_scaling; transformers 5 one rope_parameters object
  // (with rope_theta inside, rope_type "default" when unscaled).
  const char* rope_key = js.contains("rope_parameters") ? "rope_parameters" : "rope_scaling";
  if (js.contains(rope_key)) used.insert(rope_key);
  if (js.contains(rope_key) && !js[rope_key].is_null()) {
    const auto& r = js[rope_key];
    COLOSSAL_CHECK(r.is_object(), "[llama] ", origin, ": ", rope_key, " expected an object");
    if (r.contains("rope_theta")) {
      COLOSSAL_CHECK(r["rope_theta"].is_number(), "[llama] ", origin, ": ", rope_key,
                     ".rope_theta expected a number");
      c.rope_theta = r["rope_theta"].get<double>();
    }
    std::string type = r.value("rope_type", r.value("type", std::string()));
    COLOSSAL_CHECK(type == "linear" || type == "dynamic" || type == "llama3" || type == "default", "[llama] ",
                   origin, ": rope_scaling type '", type, "' is not supported (linear, dynamic, llama3)");
    c.rope_scaling.type = type == "default" ? "" : type;
    c.rope_scaling.factor = r.value("factor", 1.0);
    c.rope_scaling.low_freq_factor = r.value("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = r.value("high_freq_factor", 4.0);
    c.rope_scaling.original_max_position_embeddings = r.value("original_max_position_embeddings", int64_t{0});
    COLOSSAL_CHECK(c.rope_scaling.type.empty() || c.rope_scaling.factor >= 1.0, "[llama] ", origin,
                   ": rope_scaling.factor must be >= 1, got ", c.rope_scaling.factor);
    COLOSSAL_CHECK(c.rope_scaling.type != "llama3" ||
                       c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor,
                   "[llama] ", origin, ": rope_scaling high_freq_factor (", c.rope_scaling.high_freq_factor,
                   ") must exceed low_freq_factor (", c.rope_scaling.low_freq_factor, ")");
  }
  if (unknown) {
    for (auto it = js.begin(); it != js.end(); ++it)
      if (!used.count(it.key()) && !kIgnored.count(it.key())) unknown->push_back(it.key());
  }
  try {
    c.validate();
  } catch (const std::exception& e) {
    COLOSSAL_FAIL(origin, ": ", error_text(e));
  }
  return c;
}

LlamaConfig LlamaConfig::from_json_file(const std::string& path, std::vector<std::string>* unknown) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[llama] cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_json_text(ss.str(), "'" + path + "'", unknown, /*require_shape=*/true);
}

std::string LlamaConfig::to_json() const {
  json js;
  // The family read (a Mixtral built in code says llama: experts make it mixtral).
  const std::string type = is_moe() ? "mixtral" : model_type;
  static const std::map<std::string, std::string> kArchitecture = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"mixtral", "MixtralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}};
  js["architectures"] = {kArchitecture.at(type)};
  js["model_type"] = type;
  js["hidden_act"] = "silu";
  js["vocab_size"] = vocab_size;
  js["hidden_size"] = hidden_size;
  js["intermediate_size"] = intermediate_size;
  js["num_hidden_layers"] = num_hidden_layers;
  js["num_attention_heads"] = num_attention_heads;
  js["num_key_value_heads"] = num_key_value_heads;
  js["head_dim"] = resolved_head_dim();
  js["rms_norm_eps"] = rms_norm_eps;
  js["rope_theta"] = rope_theta;
  js["max_position_embeddings"] = max_position_embeddings;
  js["tie_word_embeddings"] = tie_word_embeddings;
  if (type != "qwen2") js["attention_bias"] = attention_bias;  // Qwen2 has no such field: its q/k/v bias is fixed
  if (type == "qwen2" || type == "qwen3") js["use_sliding_window"] = false;
  if (type == "mistral" || type == "mixtral") {
    if (sliding_window > 0) js["sliding_window"] = sliding_window;
    else js["sliding_window"] = nullptr;
  }
  js["initializer_range"] = initializer_range;
  js["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() > 1) js["eos_token_id"] = eos_token_ids;
  else js["eos_token_id"] = eos_token_id;
  if (pad_token_id >= 0) js["pad_token_id"] = pad_token_id;
  if (rope_scaling.type.empty()) {
    js["rope_scaling"] = nullptr;
  } else {
    json r;
    r["rope_type"] = rope_scaling.type;
    r["factor"] = rope_scaling.factor;
    if (rope_scaling.type == "llama3") {
      r["low_freq_factor"] = rope_scaling.low_freq_factor;
      r["high_freq_factor"] = rope_scaling.high_freq_factor;
    }
    if (rope_scaling.original_max_position_embeddings > 0)
      r["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    js["rope_scaling"] = r;
  }
  if (is_moe()) {
    js["num_local_experts"] = num_local_experts;
    js["num_experts_per_tok"] = num_experts_per_tok;
    js["router_aux_loss_coef"] = router_aux_loss_coef;
    js["output_router_logits"] = output_router_logits;
    js["router_jitter_noise"] = router_jitter_noise;
    if (router_z_loss_coef > 0) js["router_z_loss_coef"] = router_z_loss_coef;
    if (capacity_factor > 0) js["capacity_factor"] = capacity_factor;
  }
  js["torch_dtype"] = "float32";
  return js.dump(2) + "\n";
}

std::vector<double> LlamaConfig::rope_inv_freq(int64_t seq_len) const {
  const int64_t d = resolved_head_dim();
  const auto& s = rope_scaling;
  double base = rope_theta;
  int64_t original = s.original_max_position_embeddings > 0 ? s.original_max_position_embeddings
                                                            : max_position_embeddings;
  if (s.type == "dynamic" && seq_len > original) {
    // NTK-aware: grow the base so the longest wavelength covers the longer sequence.
    base = rope_theta * std::pow(s.factor * seq_len / original - (s.factor - 1), static_cast<double>(d) / (d - 2));
  }
  std::vector<double> inv(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv[i] = 1.0 / std::pow(base, 2.0 * i / d);
  if (s.type == "linear") {
    for (auto& f : inv) f /= s.factor;
  } else if (s.type == "llama3") {
    const double low_wavelen = original / s.low_freq_factor;
    const double high_wavelen = original / s.high_freq_factor;
    for (auto& f : inv) {
      double wavelen = 2 * M_PI / f;
      if (wavelen < high_wavelen) continue;  // high frequencies: unchanged
      if (wavelen > low_wavelen) {
        f /= s.factor;  // low frequencies: interpolated fully
        continue;
      }
      double smooth = (original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * f / s.factor + smooth * f;
    }
  }
  return inv;
}

}  // namespace colossal::llama
