#pragma once
// Perplexity of a generation model over a tokenised dataset: every sample scored the way
// train_llama's evaluation scores it (next-token cross entropy over the positions its labels
// keep), through LlamaInference's forward, so the packed formats (bf16, int8, int4) can be
// compared with fp32 on the same held-out text.
#include <cstdint>

#include "llama/dataset.h"
#include "llama/inference.h"

namespace colossal::llama {

struct PerplexityResult {
  double mean_nll = 0;  // nats per scored token
  double perplexity = 0;
  int64_t tokens = 0;   // scored
  int64_t samples = 0;
};

/// `max_samples` > 0 scores only the first that many samples. `chunk` as LlamaInference::logits:
/// 0 scores a sample in one forward (the prompt path), 1 token by token (the decode path: for
/// int8/int4 weights, the integer kernels with the activations quantized).
PerplexityResult perplexity(LlamaInference& model, const TokenDataset& data, int64_t max_samples = 0,
                            int64_t chunk = 0);

}  // namespace colossal::llama
