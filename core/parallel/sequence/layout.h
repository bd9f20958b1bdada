#pragma once
// Which tokens of a sequence each sequence-parallel rank holds.
//   contiguous (split_gather, all_to_all): rank r holds [r T/n, (r+1) T/n)
//   zigzag (ring_attn): the sequence cut into 2n chunks, rank r holds chunks r and 2n-1-r, so
//     under a causal mask every rank does the same attention work
#include <torch/types.h>

#include "core/parallel/context.h"

namespace colossal::parallel {

/// Global positions of rank `rank`'s tokens (of `size`) under `mode`, in the order it holds them.
torch::Tensor sequence_positions(int64_t seq_len, SequenceParallelMode mode, int rank, int size);

/// Global positions of this rank's tokens, in the order the rank holds them (int64). All
/// positions when the mode shards nothing or the group is one rank.
torch::Tensor local_positions(int64_t seq_len, const ParallelContext& ctx);

/// Checks that `seq_len` splits evenly for the mode (T % n, or T % 2n for the zigzag), naming
/// the numbers when it does not.
void check_sequence_splits(int64_t seq_len, const ParallelContext& ctx);

/// This rank's part of a [B, T, ...] tensor (rows at local_positions along dimension 1).
torch::Tensor take_local(const torch::Tensor& full, const ParallelContext& ctx);

/// The whole [B, T, ...] tensor from every rank's part (all-gathered over the sequence group and
/// put back in sequence order). No gradient: for outputs (logits), not for training.
torch::Tensor gather_local(const torch::Tensor& local, const ParallelContext& ctx);

/// True when the model holds a sequence shard outside the attention and MLP blocks' own
/// communication (all three modes), i.e. when inputs must be cut with take_local.
bool shards_sequence(const ParallelContext& ctx);

}  // namespace colossal::parallel
