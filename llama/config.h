#pragma once
// LLaMA hyper-parameters, named as in a Hugging Face config.json.
#include <cstdint>
#include <string>

namespace colossal::llama {

struct LlamaConfig {
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
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  double initializer_range = 0.02;

  int64_t resolved_head_dim() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  /// Throws naming the field when the numbers contradict each other.
  void validate() const;
  /// Parameter count of the model this config builds.
  int64_t num_parameters() const;
  /// A LLaMA-shaped config of about `target` parameters (a 128-dim head, intermediate ~8/3 of
  /// hidden, depth grown with width), for benchmarks.
  static LlamaConfig shaped(int64_t target_parameters, int64_t vocab_size = 32000);
};

}  // namespace colossal::llama
