#include "llama/config.h"

#include <algorithm>
#include <cmath>

#include "core/common/check.h"

namespace colossal::llama {

const std::vector<std::string>& LlamaConfig::families() {
  static const std::vector<std::string> kFamilies = {"llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2",
                                                         "gpt2"};
  return kFamilies;
}

std::string LlamaConfig::family_list() {
  std::string out;
  for (const auto& f : families()) out += (out.empty() ? "" : ", ") + f;
  return out;
}

void LlamaConfig::validate() const {
  auto positive = [](const char* name, int64_t v) {
    COLOSSAL_CHECK(v > 0, "[llama] config: ", name, " must be > 0, got ", v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_hidden_layers", num_hidden_layers);
  positive("num_attention_heads", num_attention_heads);
  positive("num_key_value_heads", num_key_value_heads);
  COLOSSAL_CHECK(num_attention_heads % num_key_value_heads == 0, "[llama] config: num_attention_heads (",
                 num_attention_heads, ") must be a multiple of num_key_value_heads (", num_key_value_heads, ")");
  COLOSSAL_CHECK(head_dim > 0 || hidden_size % num_attention_heads == 0, "[llama] config: hidden_size (",
                 hidden_size, ") is not divisible by num_attention_heads (", num_attention_heads,
                 ") and head_dim is not given");
  if (is_moe()) {
    COLOSSAL_CHECK(num_experts_per_tok >= 1 && num_experts_per_tok <= num_local_experts,
                   "[llama] config: num_experts_per_tok must be in 1..num_local_experts (", num_local_experts,
                   "), got ", num_experts_per_tok);
    COLOSSAL_CHECK(router_aux_loss_coef >= 0 && router_z_loss_coef >= 0 && capacity_factor >= 0 &&
                       router_jitter_noise >= 0 && router_jitter_noise < 1,
                   "[llama] config: router_aux_loss_coef, router_z_loss_coef and capacity_factor must be >= 0 and "
                   "router_jitter_noise in [0, 1), got ", router_aux_loss_coef, ", ", router_z_loss_coef, ", ",
                   capacity_factor, ", ", router_jitter_noise);
  }
  COLOSSAL_CHECK(std::find(families().begin(), families().end(), model_type) != families().end(),
                 "[llama] config: model_type '", model_type, "' is not one of ", family_list());
  COLOSSAL_CHECK(hidden_act == "silu" || hidden_act == "gelu" || hidden_act == "gelu_pytorch_tanh",
                 "[llama] config: hidden_act '", hidden_act, "' is not silu, gelu or gelu_pytorch_tanh");
  COLOSSAL_CHECK(!is_moe() || (hidden_act == "silu" && gated_mlp),
                 "[llama] config: experts are SwiGLU (hidden_act silu)");
  COLOSSAL_CHECK(query_pre_attn_scalar >= 0 && attn_logit_softcapping >= 0 && final_logit_softcapping >= 0,
                 "[llama] config: query_pre_attn_scalar, attn_logit_softcapping and final_logit_softcapping must be "
                 ">= 0 (0: unused), got ", query_pre_attn_scalar, ", ", attn_logit_softcapping, ", ",
                 final_logit_softcapping);
  COLOSSAL_CHECK(sliding_layers.empty() || static_cast<int64_t>(sliding_layers.size()) == num_hidden_layers,
                 "[llama] config: layer_types has ", sliding_layers.size(), " entries for ", num_hidden_layers,
                 " layers");
  COLOSSAL_CHECK(model_type != "mixtral" || is_moe(), "[llama] config: model_type mixtral needs num_local_experts > 0");
  COLOSSAL_CHECK(!is_moe() || model_type == "mixtral" || model_type == "llama", "[llama] config: ", model_type,
                 " with num_local_experts: only mixtral's experts are implemented");
  COLOSSAL_CHECK(sliding_window >= 0, "[llama] config: sliding_window must be >= 0 (0: none), got ", sliding_window);
  COLOSSAL_CHECK(num_local_experts >= 0, "[llama] config: num_local_experts must be >= 0, got ", num_local_experts);
  COLOSSAL_CHECK(resolved_head_dim() % 2 == 0, "[llama] config: head_dim must be even for rotary embeddings, got ",
                 resolved_head_dim());
}

int64_t LlamaConfig::layer_window(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (sliding_layers.empty()) return sliding_window;
  return sliding_layers.at(static_cast<size_t>(layer)) ? sliding_window : 0;
}

int64_t LlamaConfig::shared_window() const {
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    if (layer_window(i) == 0) return 0;
  return sliding_window;
}

double LlamaConfig::attention_scale() const {
  const double scalar = query_pre_attn_scalar > 0 ? query_pre_attn_scalar : static_cast<double>(resolved_head_dim());
  return 1.0 / std::sqrt(scalar);
}

int64_t LlamaConfig::num_parameters() const {
  int64_t d = resolved_head_dim();
  int64_t q = hidden_size * num_attention_heads * d, kv = 2 * hidden_size * num_key_value_heads * d;
  int64_t o = num_attention_heads * d * hidden_size;
  int64_t bias = (q_k_v_bias() ? num_attention_heads * d + 2 * num_key_value_heads * d : 0) +
                 (attention_bias ? hidden_size : 0) + (qk_norm ? 2 * d : 0);
  int64_t expert = (gated_mlp ? 3 : 2) * hidden_size * intermediate_size +
                   (mlp_bias ? intermediate_size + hidden_size : 0);
  int64_t mlp = is_moe() ? num_local_experts * expert + num_local_experts * hidden_size : expert;
  const int64_t norm = (layer_norm ? 2 : 1) * hidden_size;  // LayerNorm: weight and bias
  int64_t layer = q + kv + o + bias + mlp + (sandwich_norms ? 4 : 2) * norm;
  int64_t embed = vocab_size * hidden_size;
  const int64_t positions = learned_positions ? max_position_embeddings * hidden_size : 0;
  return embed + positions + num_hidden_layers * layer + norm + (tie_word_embeddings ? 0 : embed);
}

int64_t LlamaConfig::num_active_parameters() const {
  if (!is_moe()) return num_parameters();
  const int64_t idle = (num_local_experts - num_experts_per_tok) * 3 * hidden_size * intermediate_size;
  return num_parameters() - num_hidden_layers * idle;
}

LlamaConfig LlamaConfig::shaped(int64_t target, int64_t vocab) {
  LlamaConfig c;
  c.vocab_size = vocab;
  // Widths of the LLaMA family; pick the one whose natural depth lands nearest the target.
  struct Shape { int64_t hidden, layers; };
  const Shape shapes[] = {{512, 8}, {768, 12}, {1024, 16}, {1536, 20}, {2048, 22}, {2560, 24},
                          {3200, 26}, {4096, 32}, {5120, 40}};
  int64_t best_err = -1;
  for (auto s : shapes) {
    LlamaConfig t = c;
    t.hidden_size = s.hidden;
    t.num_attention_heads = s.hidden / 128 > 0 ? s.hidden / 128 : 1;
    t.num_key_value_heads = t.num_attention_heads;
    t.intermediate_size = (s.hidden * 8 / 3 + 255) / 256 * 256;
    // Depth to reach the target at this width (at least 2 layers).
    LlamaConfig one = t;
    one.num_hidden_layers = 1;
    LlamaConfig two = t;
    two.num_hidden_layers = 2;
    int64_t layer = two.num_parameters() - one.num_parameters();
    int64_t base = one.num_parameters() - layer;
    t.num_hidden_layers = std::max<int64_t>(2, std::llround(static_cast<double>(target - base) / layer));
    int64_t err = std::llabs(t.num_parameters() - target) + std::llabs(t.num_hidden_layers - s.layers) * layer / 4;
    if (best_err < 0 || err < best_err) {
      best_err = err;
      c = t;
    }
  }
  return c;
}

}  // namespace colossal::llama
