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
    "output_hidden_states", "return_dict", "model_type", "hidden_act", "hidden_activation"};

bool is_gemma(const std::string& family) { return family == "gemma" || family == "gemma2"; }

// GPT-2's config.json names its fields its own way (n_embd, n_layer, ...): read into the same
// config, with GPT-2's blocks switched on.
LlamaConfig gpt2_from_json(const json& js, const std::string& origin, std::vector<std::string>* unknown,
                           bool require_shape) {
  static const std::set<std::string> kIgnoredGpt2 = {
      "architectures", "transformers_version", "torch_dtype", "dtype", "use_cache", "model_type", "_name_or_path",
      "resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
      "summary_proj_to_labels", "summary_first_dropout", "reorder_and_upcast_attn", "task_specific_params",
      "output_attentions", "output_hidden_states", "return_dict", "n_ctx"};
  if (require_shape)
    for (const char* key : {"vocab_size", "n_embd", "n_layer", "n_head", "n_positions"})
      COLOSSAL_CHECK(js.contains(key) && !js[key].is_null(), "[llama] ", origin, ": gpt2: field '", key,
                     "' is missing (a GPT-2 config.json gives vocab_size, n_embd, n_layer, n_head and n_positions)");
  std::set<std::string> used;
  auto field = [&](const char* key) -> const json* {
    if (!js.contains(key)) return nullptr;
    used.insert(key);
    return js[key].is_null() ? nullptr : &js[key];
  };
  auto read_int = [&](const char* key, int64_t& out) {
    if (const json* v = field(key)) {
      COLOSSAL_CHECK(v->is_number_integer(), "[llama] ", origin, ": field '", key, "' expected an integer, found ",
                     v->dump());
      out = v->get<int64_t>();
    }
  };
  auto read_bool = [&](const char* key, bool fallback) {
    if (const json* v = field(key)) {
      COLOSSAL_CHECK(v->is_boolean(), "[llama] ", origin, ": field '", key, "' expected true or false, found ",
                     v->dump());
      return v->get<bool>();
    }
    return fallback;
  };
  LlamaConfig c;
  c.model_type = "gpt2";
  c.learned_positions = c.layer_norm = c.mlp_bias = c.attention_bias = true;
  c.gated_mlp = false;
  c.tie_word_embeddings = true;
  c.hidden_act = "gelu_pytorch_tanh";  // gelu_new: the same tanh formula
  c.rms_norm_eps = 1e-5;
  c.bos_token_id = c.eos_token_id = 50256;
  read_int("vocab_size", c.vocab_size);
  read_int("n_embd", c.hidden_size);
  read_int("n_layer", c.num_hidden_layers);
  read_int("n_head", c.num_attention_heads);
  c.num_key_value_heads = c.num_attention_heads;
  read_int("n_positions", c.max_position_embeddings);
  c.intermediate_size = 4 * c.hidden_size;  // n_inner null
  read_int("n_inner", c.intermediate_size);
  if (const json* v = field("activation_function")) {
    COLOSSAL_CHECK(*v == "gelu_new" || *v == "gelu_pytorch_tanh" || *v == "gelu", "[llama] ", origin,
                   ": gpt2: activation_function is ", v->dump(),
                   "; gelu_new, gelu_pytorch_tanh and gelu are supported");
    c.hidden_act = *v == "gelu" ? "gelu" : "gelu_pytorch_tanh";
  }
  if (const json* v = field("layer_norm_epsilon")) {
    COLOSSAL_CHECK(v->is_number(), "[llama] ", origin, ": field 'layer_norm_epsilon' expected a number");
    c.rms_norm_eps = v->get<double>();
  }
  if (const json* v = field("initializer_range")) c.initializer_range = v->get<double>();
  if (!read_bool("scale_attn_weights", true)) c.query_pre_attn_scalar = 1;  // scores unscaled
  COLOSSAL_CHECK(!read_bool("scale_attn_by_inverse_layer_idx", false), "[llama] ", origin,
                 ": gpt2: scale_attn_by_inverse_layer_idx true is not supported");
  COLOSSAL_CHECK(!read_bool("add_cross_attention", false), "[llama] ", origin,
                 ": gpt2: add_cross_attention true is not supported (a decoder without an encoder)");
  c.tie_word_embeddings = read_bool("tie_word_embeddings", true);
  read_int("bos_token_id", c.bos_token_id);
  read_int("eos_token_id", c.eos_token_id);
  read_int("pad_token_id", c.pad_token_id);
  if (unknown)
    for (auto it = js.begin(); it != js.end(); ++it)
      if (!used.count(it.key()) && !kIgnoredGpt2.count(it.key())) unknown->push_back(it.key());
  try {
    c.validate();
  } catch (const std::exception& e) {
    COLOSSAL_FAIL(origin, ": ", error_text(e));
  }
  return c;
}

std::string gpt2_to_json(const LlamaConfig& c) {
  json js;
  js["architectures"] = {"GPT2LMHeadModel"};
  js["model_type"] = "gpt2";
  js["vocab_size"] = c.vocab_size;
  js["n_embd"] = c.hidden_size;
  js["n_layer"] = c.num_hidden_layers;
  js["n_head"] = c.num_attention_heads;
  js["n_positions"] = c.max_position_embeddings;
  js["n_inner"] = c.intermediate_size;
  js["activation_function"] = c.hidden_act == "gelu" ? "gelu" : "gelu_new";
  js["layer_norm_epsilon"] = c.rms_norm_eps;
  js["initializer_range"] = c.initializer_range;
  js["scale_attn_weights"] = c.query_pre_attn_scalar != 1;
  js["tie_word_embeddings"] = c.tie_word_embeddings;
  js["bos_token_id"] = c.bos_token_id;
  js["eos_token_id"] = c.eos_token_id;
  if (c.pad_token_id >= 0) js["pad_token_id"] = c.pad_token_id;
  js["torch_dtype"] = "float32";
  return js.dump(2) + "\n";
}

}  // namespace

LlamaConfig LlamaConfig::from_json_text(const std::string& text, const std::string& origin,
                                        std::vector<std::string>* unknown, bool require_shape) {
  auto js = json::parse(text, nullptr, /*allow_exceptions=*/false);
  COLOSSAL_CHECK(!js.is_discarded() && js.is_object(), "[llama] ", origin, ": not a JSON object");
  if (js.contains("model_type") && js["model_type"] == "gpt2")
    return gpt2_from_json(js, origin, unknown, require_shape);
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
    const auto& known = LlamaConfig::families();
    COLOSSAL_CHECK(t.is_string() && std::find(known.begin(), known.end(), t.get<std::string>()) != known.end(),
                   "[llama] ", origin, ": model_type is ", t.dump(), ", expected one of ", LlamaConfig::family_list());
    c.model_type = t.get<std::string>();
  }
  const std::string family = c.model_type;
  // Qwen2 always has q/k/v biases (no field says so); Qwen3 always normalises q and k per head.
  c.qkv_bias = family == "qwen2";
  c.qk_norm = family == "qwen3";
  // The gated MLP's activation: transformers' Gemma 2 reads hidden_activation, the others hidden_act.
  const char* act_key = family == "gemma2" ? "hidden_activation" : "hidden_act";
  c.hidden_act = is_gemma(family) ? "gelu_pytorch_tanh" : "silu";
  if (js.contains(act_key) && !js[act_key].is_null()) {
    const auto& act = js[act_key];
    COLOSSAL_CHECK(act == "silu" || act == "gelu" || act == "gelu_pytorch_tanh", "[llama] ", origin, ": ", family, ": ",
                   act_key, " is ", act.dump(), "; the gated MLP implements \"silu\" (SwiGLU), \"gelu\" and "
                   "\"gelu_pytorch_tanh\" (GeGLU)");
    c.hidden_act = act.get<std::string>();
  }
  if (is_gemma(family)) {
    c.norm_plus_one = true;
    c.scale_embeddings = true;
    c.tie_word_embeddings = true;  // Gemma's default
    bool bidirectional = false;
    read_bool("use_bidirectional_attention", bidirectional);
    COLOSSAL_CHECK(!bidirectional, "[llama] ", origin, ": ", family,
                   ": use_bidirectional_attention true is not supported (a decoder attends causally)");
  }
  if (family == "gemma2") {
    c.sandwich_norms = true;
    c.query_pre_attn_scalar = 256;  // Gemma 2's defaults, as transformers fills them in
    c.attn_logit_softcapping = 50;
    c.final_logit_softcapping = 30;
    c.sliding_window = 4096;
    for (const char* key : {"query_pre_attn_scalar", "attn_logit_softcapping", "final_logit_softcapping"}) {
      if (!js.contains(key)) continue;
      used.insert(key);
      double& field = std::string(key) == "query_pre_attn_scalar" ? c.query_pre_attn_scalar
                      : std::string(key) == "attn_logit_softcapping" ? c.attn_logit_softcapping
                                                                      : c.final_logit_softcapping;
      if (js[key].is_null()) {  // no cap (the scalar cannot be null)
        COLOSSAL_CHECK(std::string(key) != "query_pre_attn_scalar", "[llama] ", origin,
                       ": field 'query_pre_attn_scalar' expected a number, found null");
        field = 0;
        continue;
      }
      COLOSSAL_CHECK(js[key].is_number() && js[key].get<double>() > 0, "[llama] ", origin, ": field '", key,
                     "' expected a positive number or null, found ", js[key].dump());
      field = js[key].get<double>();
    }
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
  if (js.contains("layer_types") && !js["layer_types"].is_null()) {  // transformers 5: one attention kind per layer
    used.insert("layer_types");
    const auto& types = js["layer_types"];
    COLOSSAL_CHECK(types.is_array(), "[llama] ", origin, ": field 'layer_types' expected a list, found ", types.dump());
    for (size_t i = 0; i < types.size(); ++i) {
      const bool sliding = types[i] == "sliding_attention";
      COLOSSAL_CHECK(types[i] == "full_attention" || (sliding && family == "gemma2"), "[llama] ", origin, ": ", family,
                     ": layer_types[", i, "] is ", types[i].dump(), "; ",
                     family == "gemma2" ? "\"full_attention\" and \"sliding_attention\" layers are supported"
                                        : "only \"full_attention\" layers are supported in this family");
      c.sliding_layers.push_back(sliding);
    }
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
  } else if (js.contains("sliding_window") && (family == "mistral" || family == "mixtral" || family == "gemma2")) {
    used.insert("sliding_window");
    const auto& w = js["sliding_window"];
    COLOSSAL_CHECK(w.is_null() || (w.is_number_integer() && w.get<int64_t>() > 0), "[llama] ", origin,
                   ": field 'sliding_window' expected null or a positive integer, found ", w.dump());
    // A window as long as the context changes nothing: kept as none.
    c.sliding_window = !w.is_null() && w.get<int64_t>() < c.max_position_embeddings ? w.get<int64_t>() : 0;
  }
  if (family == "gemma2") {
    if (c.sliding_window >= c.max_position_embeddings) c.sliding_window = 0;
    if (c.sliding_layers.empty())  // transformers' default: even layers slide, odd ones are global
      for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back(i % 2 == 0);
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
  if (model_type == "gpt2") return gpt2_to_json(*this);
  json js;
  // The family read (a Mixtral built in code says llama: experts make it mixtral).
  const std::string type = is_moe() ? "mixtral" : model_type;
  static const std::map<std::string, std::string> kArchitecture = {
      {"llama", "LlamaForCausalLM"}, {"mistral", "MistralForCausalLM"}, {"mixtral", "MixtralForCausalLM"},
      {"qwen2", "Qwen2ForCausalLM"}, {"qwen3", "Qwen3ForCausalLM"}, {"gemma", "GemmaForCausalLM"},
      {"gemma2", "Gemma2ForCausalLM"}};
  js["architectures"] = {kArchitecture.at(type)};
  js["model_type"] = type;
  js[type == "gemma2" ? "hidden_activation" : "hidden_act"] = hidden_act;
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
  // Gemma 2's sliding layers need a number: one as long as the context is no window at all.
  if (type == "gemma2") js["sliding_window"] = sliding_window > 0 ? sliding_window : max_position_embeddings;
  if (type == "gemma2") {
    // An integer in transformers' Gemma2Config (strictly checked).
    const double scalar = query_pre_attn_scalar > 0 ? query_pre_attn_scalar : static_cast<double>(resolved_head_dim());
    if (scalar == std::floor(scalar)) js["query_pre_attn_scalar"] = static_cast<int64_t>(scalar);
    else js["query_pre_attn_scalar"] = scalar;
    auto cap = [](double v) { return v > 0 ? json(v) : json(nullptr); };
    js["attn_logit_softcapping"] = cap(attn_logit_softcapping);
    js["final_logit_softcapping"] = cap(final_logit_softcapping);
    json types = json::array();
    for (int64_t i = 0; i < num_hidden_layers; ++i)
      types.push_back(!sliding_layers.empty() && sliding_layers[static_cast<size_t>(i)] ? "sliding_attention"
                                                                                       : "full_attention");
    js["layer_types"] = types;
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
