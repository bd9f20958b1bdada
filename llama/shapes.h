#pragma once
// Named benchmark shapes and the model-FLOPs arithmetic behind MFU figures.
#include <string>

#include "core/parallel/pipeline/stage_split.h"
#include "core/tools/model_analysis.h"
#include "llama/config.h"

namespace colossal::llama {

struct BenchmarkShape {
  LlamaConfig config;
  int64_t sequence = 0;  // tokens per training sample
};

/// "S": dim 288, 6 layers, 6 heads, ffn 768, vocab 32000, sequence 256.
/// "M": dim 768, 12 layers, 12 heads, ffn 2048, vocab 32000, sequence 512.
/// "1B": dim 2048, 18 layers, 16 heads, ffn 5632, vocab 32000, sequence 2048 (GPU benchmarks).
/// Throws naming the known shapes for anything else.
BenchmarkShape benchmark_shape(const std::string& name);

/// Parameters that take part in matrix products (every projection, lm_head included even
/// when tied; not the embedding lookup or the norms).
int64_t matmul_parameters(const LlamaConfig& config);

/// Model FLOPs to train on one token of a `sequence`-token sample: 3 x forward, with
/// forward = 2 x matmul_parameters + 4 x layers x hidden x sequence (attention scores and
/// values, full causal square as commonly counted). Recomputation is not counted.
double training_flops_per_token(const LlamaConfig& config, int64_t sequence);

/// What pipeline stages balance (PipelineLayout::Balance::kCost): each decoder layer's and the
/// head's training FLOPs per token, counted as above. The embedding lookup and the fused cross
/// entropy are a few operations per element against the head's 2 x hidden per logit: not counted.
parallel::pipeline::StageCosts stage_costs(const LlamaConfig& config, int64_t sequence);

/// The model's shape for the analysis tools (core/tools/model_analysis.h).
tools::ModelSpec model_spec(const LlamaConfig& config);

}  // namespace colossal::llama
