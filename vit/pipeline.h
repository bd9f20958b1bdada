#pragma once
// A ViT pipeline stage as the pipeline runtime drives it (core/parallel/pipeline/runner.h): its
// chunks' forward, the last stage's classification loss, each chunk's parameters.
#include <torch/nn/functional/loss.h>

#include "core/parallel/pipeline/runner.h"
#include "vit/model.h"

namespace colossal::vit {

/// The loss is cross entropy over the logits in fp32 (label smoothing as given), the mean over
/// the microbatch's images.
inline parallel::pipeline::StageFunctions stage_functions(ViTForImageClassification model,
                                                          double label_smoothing = 0.0) {
  parallel::pipeline::StageFunctions f;
  f.forward = [model](int chunk, const torch::Tensor& x) mutable { return model->forward_chunk(chunk, x); };
  f.loss = [label_smoothing](const torch::Tensor& logits, const torch::Tensor& labels) {
    return torch::nn::functional::cross_entropy(
        logits.to(torch::kFloat), labels,
        torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(label_smoothing));
  };
  f.parameters = [model](int chunk) mutable { return model->chunk_parameters(chunk); };
  return f;
}

}  // namespace colossal::vit
