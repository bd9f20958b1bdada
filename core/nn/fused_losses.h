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

/// The output layer and the loss in one: mean cross entropy of logits = hidden @ weight^T,
/// hidden [N, D], weight [V, D] (same dtype, fp32 or bf16), target [N] (int64).
///
/// The gradient of a loss is known once the loss is: when a gradient is wanted, forward computes
/// the logits, then per row (kernels/cpu/cross_entropy: in L2, one exp per element) the loss and
/// softmax - one_hot over the logits' own buffer. Backward is then the two products of a linear
/// layer's backward, times the incoming gradient. No second logits-sized tensor ever exists, and
/// the logits are read from memory once instead of three times. The value matches
/// cross_entropy(hidden @ weight^T, target) within fp32 rounding (tested).
/// CUDA tensors: the same value and gradients, with the rows in chunks of at most 256 MiB of
/// logits and each chunk's gradient products made in forward (no logits tensor for all rows).
torch::Tensor linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight, const torch::Tensor& target,
                                   int64_t ignore_index = -100);

/// Per-row log-probability of the target under softmax(hidden @ weight^T): [N] fp32, 0 where the
/// target is `ignore_index`. What preference losses (DPO, ORPO) and policy gradients sum per
/// sequence. On the CPU fused as linear_cross_entropy is: forward turns the logits into
/// softmax - one_hot in place, backward scales each row by its incoming gradient and makes the two
/// products (one backward per forward: the buffer is spent). Elsewhere: log_softmax and gather.
torch::Tensor linear_token_log_probs(const torch::Tensor& hidden, const torch::Tensor& weight,
                                     const torch::Tensor& target, int64_t ignore_index = -100);

/// The same from logits [N, V] (any float dtype; fp32 result).
torch::Tensor token_log_probs(const torch::Tensor& logits, const torch::Tensor& target, int64_t ignore_index = -100);

}  // namespace colossal::nn
