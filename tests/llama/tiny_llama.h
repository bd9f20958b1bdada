#pragma once
// The tiny LLaMA the parallel tests share: 4 heads over 2 kv heads (GQA), so tp 2 splits kv heads
// and tp 4 keeps them whole; a vocabulary that pads under tensor parallelism.
#include "llama/config.h"

namespace colossal::llama {

inline LlamaConfig tiny_test_llama() {
  LlamaConfig c;
  c.vocab_size = 100;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  return c;
}

/// Qwen2's blocks on the tiny shape: q/k/v biases (o without), the embedding tied to the head.
inline LlamaConfig tiny_test_qwen2(bool tied = true) {
  LlamaConfig c = tiny_test_llama();
  c.model_type = "qwen2";
  c.qkv_bias = true;
  c.tie_word_embeddings = tied;
  return c;
}

/// Qwen3's: q/k RMSNorm per head, a head_dim of its own (12, not hidden / heads), and (Qwen3's
/// attention_bias) biases on q, k, v and o.
inline LlamaConfig tiny_test_qwen3() {
  LlamaConfig c = tiny_test_llama();
  c.model_type = "qwen3";
  c.qk_norm = true;
  c.head_dim = 12;
  c.attention_bias = true;
  return c;
}

/// Gemma 2's: GeGLU (tanh), (1 + w) norms around both halves, scaled embeddings, an attention
/// scale of its own, soft caps of 10 and 5 (Gemma 2's are 50 and 30), and a window of 5 on the
/// even layers (the tests' sequences are longer). With caps of 3 and 2 the layouts part by
/// 2e-5..5e-5 in the second and third steps' gradient norms while the first step's gradients
/// agree to 1e-5 (measured): such low caps make later steps sensitive to fp32 rounding order.
inline LlamaConfig tiny_test_gemma2(bool tied = true) {
  LlamaConfig c = tiny_test_llama();
  c.model_type = "gemma2";
  c.hidden_act = "gelu_pytorch_tanh";
  c.norm_plus_one = c.scale_embeddings = c.sandwich_norms = true;
  c.head_dim = 16;
  c.query_pre_attn_scalar = 24;
  c.attn_logit_softcapping = 10;
  c.final_logit_softcapping = 5;
  c.sliding_window = 5;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back(i % 2 == 0);
  c.tie_word_embeddings = tied;
  return c;
}

/// GPT-2's: learned positions, LayerNorm with biases, a plain GELU MLP with biases, biases on
/// q, k, v and o, no rotary embedding.
inline LlamaConfig tiny_test_gpt2(bool tied = true) {
  LlamaConfig c = tiny_test_llama();
  c.model_type = "gpt2";
  c.num_key_value_heads = c.num_attention_heads;
  c.learned_positions = c.layer_norm = c.mlp_bias = c.attention_bias = true;
  c.gated_mlp = false;
  c.hidden_act = "gelu_pytorch_tanh";
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = tied;
  return c;
}

}  // namespace colossal::llama
