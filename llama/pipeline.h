#pragma once
// A LLaMA pipeline stage as the pipeline runtime drives it (core/parallel/pipeline/runner.h):
// its chunks' forward, the last stage's loss, each chunk's parameters.
#include "core/parallel/pipeline/runner.h"
#include "llama/model.h"

namespace colossal::llama {

inline parallel::pipeline::StageFunctions stage_functions(LlamaForCausalLM model) {
  parallel::pipeline::StageFunctions f;
  f.forward = [model](int chunk, const torch::Tensor& x) mutable { return model->forward_chunk(chunk, x); };
  f.loss = [model](const torch::Tensor& logits, const torch::Tensor& labels) mutable {
    return model->loss_from_logits(logits, labels);
  };
  f.parameters = [model](int chunk) mutable { return model->chunk_parameters(chunk); };
  return f;
}

}  // namespace colossal::llama
