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

}  // namespace colossal::llama
