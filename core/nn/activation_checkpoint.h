#pragma once
// Activation checkpointing: run a block without keeping its activations and run it again in
// backward. Memory falls from every activation of every block to the block inputs plus one
// block's activations, for about one extra forward of compute.
//
//   h = colossal::nn::checkpoint([&](const torch::Tensor& x) { return layer->forward(x, rope); }, h);
//
// The recomputation happens inside the outer backward (a re-entrant backward through the
// block), so parameter gradients arrive through the usual accumulators and every plugin's
// gradient hooks see them as they would without checkpointing. The block must be deterministic
// (no dropout without a saved RNG state) and take one tensor. With grad mode off, or an input
// that needs no gradient and a block without trainable parameters, it is a plain call.
#include <torch/types.h>

#include <functional>
#include <vector>

namespace colossal::nn {

using Block = std::function<torch::Tensor(const torch::Tensor&)>;

torch::Tensor checkpoint(Block block, const torch::Tensor& input);

/// The same for a block of several inputs (an activation and its conditioning, say): every input
/// that requires a gradient gets it. A block that captured a tensor with a gradient history
/// instead would backward through that history once per recomputation; pass it as an input.
/// Not under split backward (a weight-gradient store in force): that is refused by name.
using MultiBlock = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;
torch::Tensor checkpoint(MultiBlock block, const std::vector<torch::Tensor>& inputs);

}  // namespace colossal::nn
