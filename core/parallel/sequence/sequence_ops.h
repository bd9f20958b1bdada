#pragma once
// The communication steps of sequence parallelism as autograd functions. Activations are
// [batch, sequence, ...]; the sequence is dimension 1. Each is the identity in a group of one.
//   gather_sequence          forward: all-gather the sequence shards   backward: reduce-scatter
//                            (split_gather: before column-parallel layers, whose input gradient
//                            is partial on each tensor-parallel rank)
//   reduce_scatter_sequence  forward: sum partial results, keep own shard  backward: all-gather
//                            (split_gather: after row-parallel layers and the vocab embedding)
//   sequence_to_heads        Ulysses, [B, T/sp, H, D] -> [B, T, H/sp, D]   backward: the reverse
//   heads_to_sequence        Ulysses, [B, T, H/sp, D] -> [B, T/sp, H, D]   backward: the reverse
#include <torch/types.h>

#include "core/dist/group.h"

namespace colossal::parallel {

torch::Tensor gather_sequence(const torch::Tensor& x, const dist::Group& group);
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, const dist::Group& group);
torch::Tensor sequence_to_heads(const torch::Tensor& x, const dist::Group& group);
torch::Tensor heads_to_sequence(const torch::Tensor& x, const dist::Group& group);

}  // namespace colossal::parallel
