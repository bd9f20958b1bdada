#pragma once
// Decoder hyper-parameters, named as in a Hugging Face config.json: LLaMA and the families built
// from the same blocks (Mistral, Mixtral, Qwen2/2.5, Qwen3, Gemma, Gemma 2, GPT-2), told apart by
// model_type.
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::llama {

/// rope_scaling of config.json: none, linear (positions / factor), dynamic (NTK: the base grows
/// once a sequence exceeds the original length), llama3 (per-frequency bands).
struct RopeScaling {
  std::string type;  // "" (none) | linear | dynamic | llama3
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;           // llama3, dynamic (0: max_position_embeddings)
};

struct LlamaConfig {
  // llama | mistral | mixtral | qwen2 | qwen3 | gemma | gemma2: what config.json said, written back by to_json
  // (the architecture transformers builds); the differences are the switches below.
  std::string model_type = "llama";
  int64_t vocab_size = 32000;
  int64_t hidden_size = 4096;
  int64_t intermediate_size = 11008;
  int64_t num_hidden_layers = 32;
  int64_t num_attention_heads = 32;
  int64_t num_key_value_heads = 32;
  int64_t head_dim = 0;  // 0: hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t max_position_embeddings = 2048;
  // Mistral/Mixtral: each token attends to itself and the sliding_window - 1 tokens before it
  // (transformers' rule: key position > query position - sliding_window). 0: full causal.
  int64_t sliding_window = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // bias on q, k, v and o (LLaMA's and Qwen3's field)
  bool qkv_bias = false;        // bias on q, k and v only (Qwen2: always)
  bool qk_norm = false;         // RMSNorm over each head's q and k before the rotation (Qwen3)
  // Gemma: GeGLU with the tanh GELU, RMSNorm scaling by (1 + weight) (weights start at 0),
  // embeddings multiplied by sqrt(hidden_size). Gemma 2 adds norms on the attention's and the
  // MLP's outputs ("sandwich"), tanh soft-capping of attention scores and of the logits
  // (cap * tanh(x / cap)), the attention scale 1 / sqrt(query_pre_attn_scalar), and
  // sliding-window layers alternating with global ones (layer_types).
  std::string hidden_act = "silu";  // silu (SwiGLU) | gelu_pytorch_tanh (GeGLU)
  bool norm_plus_one = false;
  bool scale_embeddings = false;
  bool sandwich_norms = false;
  double query_pre_attn_scalar = 0;   // 0: head_dim
  double attn_logit_softcapping = 0;  // 0: none
  double final_logit_softcapping = 0; // 0: none
  // GPT-2: learned absolute positions (model.embed_positions) instead of rotary ones, LayerNorm
  // with a bias instead of RMSNorm (rms_norm_eps is its epsilon), a plain MLP (up, activation,
  // down) with biases; its checkpoints' names and Conv1D layout are translated (llama/gpt2_layout.h).
  bool learned_positions = false;
  bool layer_norm = false;
  bool gated_mlp = true;
  bool mlp_bias = false;
  // Per layer, whether it is a sliding-window layer (transformers' layer_types); empty: every
  // layer is when sliding_window > 0 (Mistral).
  std::vector<bool> sliding_layers;
  double initializer_range = 0.02;
  RopeScaling rope_scaling;
  int64_t bos_token_id = 1, eos_token_id = 2, pad_token_id = -1;
  // A list-valued eos_token_id (Llama 3.x): every id in it ends generation; eos_token_id is its first.
  std::vector<int64_t> eos_token_ids;

  // Mixture of experts (Mixtral, model_type "mixtral"): every layer's MLP becomes
  // num_local_experts SwiGLU experts of intermediate_size behind a top-k router. 0: dense LLaMA.
  int64_t num_local_experts = 0;
  int64_t num_experts_per_tok = 2;
  double router_aux_loss_coef = 0.001;  // load-balancing loss weight in training (0: off)
  bool output_router_logits = false;    // transformers' switch; kept so a config round-trips
  double router_jitter_noise = 0;       // training: hidden states scaled by U(1 - j, 1 + j) before routing
  // Ours (config.json keys transformers ignores): the router z-loss weight (ST-MoE; 0: off) and
  // the capacity factor (0: dropless; else ceil(factor x tokens x k / experts) per expert).
  double router_z_loss_coef = 0;
  double capacity_factor = 0;

  bool is_moe() const { return num_local_experts > 0; }
  bool q_k_v_bias() const { return attention_bias || qkv_bias; }

  /// The model_type values this config describes, in the order error messages list them.
  static const std::vector<std::string>& families();
  /// families() joined with ", " (for messages).
  static std::string family_list();

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  /// The attention window of layer `layer` (0: full causal attention).
  int64_t layer_window(int64_t layer) const;
  /// The window every layer shares (KV blocks behind it can be freed), else 0.
  int64_t shared_window() const;
  /// Scores are q.k times this.
  double attention_scale() const;
  /// Throws naming the field when the numbers contradict each other.
  void validate() const;
  /// Reads a Hugging Face config.json: throws naming the file and field for a wrong type, a
  /// contradiction or an unsupported value (model_type, hidden_act, rope type); fields this
  /// model does not know are returned in `unknown` (the caller reports them). A file must give
  /// the model's shape (kShapeFields): a missing one is named, not guessed from a default.
  static LlamaConfig from_json_file(const std::string& path, std::vector<std::string>* unknown = nullptr);
  /// As from_json_file; `require_shape` false lets a fragment override only some fields.
  static LlamaConfig from_json_text(const std::string& text, const std::string& origin,
                                    std::vector<std::string>* unknown = nullptr, bool require_shape = false);
  /// config.json text that transformers' LlamaConfig reads back.
  std::string to_json() const;
  /// Rotary inverse frequencies [head_dim / 2] for sequences of `seq_len` tokens, with scaling.
  std::vector<double> rope_inv_freq(int64_t seq_len) const;
  /// Parameter count of the model this config builds.
  int64_t num_parameters() const;
  /// Parameters one token passes through (a MoE model: top-k experts of each layer, not all).
  int64_t num_active_parameters() const;
  /// A LLaMA-shaped config of about `target` parameters (a 128-dim head, intermediate ~8/3 of
  /// hidden, depth grown with width), for benchmarks.
  static LlamaConfig shaped(int64_t target_parameters, int64_t vocab_size = 32000);
};

}  // namespace colossal::llama
