#pragma once
// What the engine needs from a model: one forward over a flattened batch of tokens from many
// sequences (prefill chunks and single decode tokens mixed), reading and writing the paged KV
// cache, returning logits only where the engine samples.
#include <ATen/core/Tensor.h>

#include "core/inference/kv_cache.h"

namespace colossal::inference {

struct ModelInput {
  at::Tensor tokens;     // [N] int64
  at::Tensor positions;  // [N] int64
  AttentionMetadata attention;
  at::Tensor sample_index;  // [S] int64: rows of the N tokens whose next-token logits are wanted
  at::Tensor adapters;      // [N] int64, each token's LoRA adapter (0: none); undefined: none for all
};

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  virtual CacheShape cache_shape() const = 0;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_positions() const = 0;
  /// > 0: each token attends only to the last sliding_window positions (itself included), so
  /// the engine returns cache blocks behind the window. 0: full causal attention.
  virtual int64_t sliding_window() const { return 0; }
  /// LoRA adapters kept beside the base for multi-LoRA serving (ids 1..num_adapters()).
  virtual int64_t num_adapters() const { return 0; }
  /// Logits [S, vocab] in fp32 for input.sample_index.
  virtual at::Tensor forward(const ModelInput& input, PagedKVCache& cache) = 0;
};

/// Text from token ids, for streaming and stop strings.
class Detokenizer {
 public:
  virtual ~Detokenizer() = default;
  virtual std::string decode(const std::vector<int64_t>& ids) const = 0;
};

}  // namespace colossal::inference
