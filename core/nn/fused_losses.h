#pragma once
// Fused cross entropy over a large vocabulary.
//
// The usual composition (log_softmax, then nll_loss) writes a log-probability tensor as large as
// the logits, and its backward fills another one with zeros, scatters into it and reads both
// again. Here forward keeps one number per row (log-sum-exp) and backward writes the gradient
// softmax - one_hot in a single pass over the logits, in row blocks that stay in cache.
// Mean over the targets that are not `ignore_index`, computed in fp32 whatever the logits'
// dtype (the gradient comes back in the logits' dtype).
#include <torch/types.h>

namespace colossal::nn {

/// logits [N, V], target [N] (int64). Same value as
/// torch::nn::functional::cross_entropy(logits.to(kFloat), target, ignore_index).
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& target, int64_t ignore_index = -100);

}  // namespace colossal::nn
