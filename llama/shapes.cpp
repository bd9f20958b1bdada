#include "llama/shapes.h"

#include "core/common/check.h"

namespace colossal::llama {

BenchmarkShape benchmark_shape(const std::string& name) {
  BenchmarkShape s;
  auto& c = s.config;
  c.vocab_size = 32000;
  if (name == "S") {
    c.hidden_size = 288, c.num_hidden_layers = 6, c.num_attention_heads = 6, c.intermediate_size = 768;
    s.sequence = 256;
  } else if (name == "M") {
    c.hidden_size = 768, c.num_hidden_layers = 12, c.num_attention_heads = 12, c.intermediate_size = 2048;
    s.sequence = 512;
  } else if (name == "B") {
    // Balanced stages: a small vocabulary makes the embedding and head cheap, so 8 equal layers
    // split evenly at pp 2 and 4 and a schedule's measured bubble can be held against its theory.
    c.vocab_size = 512;
    c.hidden_size = 512, c.num_hidden_layers = 8, c.num_attention_heads = 8, c.intermediate_size = 1376;
    s.sequence = 256;
  } else if (name == "1B") {
    // ~1.06B parameters (the GPU benchmarks): head dim 128, no grouped queries so that the plain
    // PyTorch reference (apps/bench/llama_torch_reference.py) is the same model.
    c.hidden_size = 2048, c.num_hidden_layers = 18, c.num_attention_heads = 16, c.intermediate_size = 5632;
    s.sequence = 2048;
  } else {
    COLOSSAL_CHECK(false, "unknown benchmark shape '", name, "' (known: S, M, B, 1B)");
  }
  c.num_key_value_heads = c.num_attention_heads;
  c.max_position_embeddings = s.sequence;
  c.validate();
  return s;
}

int64_t matmul_parameters(const LlamaConfig& c) {
  int64_t d = c.resolved_head_dim();
  int64_t attention = c.hidden_size * d * (2 * c.num_attention_heads + 2 * c.num_key_value_heads);
  // A MoE token passes its router and top-k experts (what it computes, not what is stored).
  int64_t mlp = 3 * c.hidden_size * c.intermediate_size * (c.is_moe() ? c.num_experts_per_tok : 1) +
                (c.is_moe() ? c.hidden_size * c.num_local_experts : 0);
  return c.num_hidden_layers * (attention + mlp) + c.vocab_size * c.hidden_size;
}

parallel::pipeline::StageCosts stage_costs(const LlamaConfig& c, int64_t sequence) {
  LlamaConfig one_layer = c;
  one_layer.num_hidden_layers = 1;
  const double head = 3.0 * 2.0 * static_cast<double>(c.vocab_size * c.hidden_size);
  const double layer = training_flops_per_token(one_layer, sequence) - head;
  return {std::vector<double>(c.num_hidden_layers, layer), 0.0, head};
}

double training_flops_per_token(const LlamaConfig& c, int64_t sequence) {
  double forward = 2.0 * static_cast<double>(matmul_parameters(c)) +
                   4.0 * static_cast<double>(c.num_hidden_layers * c.hidden_size * sequence);
  return 3.0 * forward;
}

tools::ModelSpec model_spec(const LlamaConfig& c) {
  tools::ModelSpec s;
  s.family = c.is_moe() ? "mixtral" : c.model_type;
  s.vocab = c.vocab_size;
  s.hidden = c.hidden_size;
  s.intermediate = c.intermediate_size;
  s.layers = c.num_hidden_layers;
  s.heads = c.num_attention_heads;
  s.kv_heads = c.num_key_value_heads;
  s.head_size = c.resolved_head_dim();
  s.experts = c.num_local_experts;
  s.experts_per_token = c.is_moe() ? c.num_experts_per_tok : 0;
  s.tied_embeddings = c.tie_word_embeddings;
  s.biases = c.attention_bias;  // (attention projections only; the difference is a few hidden-sized vectors)
  s.qkv_biases = c.qkv_bias;
  s.head_norms = c.qk_norm ? 2 : 0;
  s.layer_norms = c.sandwich_norms ? 4 : 2;
  s.gated_mlp = c.gated_mlp;
  s.layer_norm = c.layer_norm;
  if (c.learned_positions) s.learned_positions = c.max_position_embeddings;
  return s;
}

}  // namespace colossal::llama
