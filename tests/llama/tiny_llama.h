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

}  // namespace colossal::llama
