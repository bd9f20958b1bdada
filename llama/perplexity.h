#pragma once
// Perplexity of a generation model over a tokenised dataset: every sample scored the way
// train_llama's evaluation scores it (next-token cross entropy over the positions its labels
// keep), through LlamaInference's forward, so the packed formats (bf16, int8, int4) can be
// compared with fp32 on the same held-out text.
#include <cstdint>
#include <vector>

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

/// Perplexity as llama.cpp's `llama-perplexity` computes it, so that the two print the same figure
/// for one file: `tokens` (a whole text, tokenised with the model's special tokens) cut into
/// consecutive chunks of `n_ctx` (a tail shorter than a chunk is dropped), each chunk's first token
/// replaced by `bos` (when >= 0), and only each chunk's second half scored (the logits at positions
/// n_ctx/2 .. n_ctx - 2 against the next token), so that every scored token sees at least n_ctx/2
/// tokens before it. `max_chunks` > 0 scores only the first that many. Throws when the text holds
/// fewer than 2 chunks (llama-perplexity's own minimum).
PerplexityResult perplexity_in_chunks(LlamaInference& model, const std::vector<int64_t>& tokens, int64_t n_ctx,
                                      int64_t bos, int64_t max_chunks = 0, int64_t chunk = 0);

}  // namespace colossal::llama
