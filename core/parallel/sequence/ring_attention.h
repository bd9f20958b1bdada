#pragma once
// Causal ring attention over a sequence-parallel group (the ring_attn mode).
//
// Each rank holds the zigzag share of the sequence (layout.h: chunks r and 2n-1-r of 2n). Key/
// value shards travel around the ring, one hop per step; each rank attends its queries to the
// shard it holds and merges the partial results with an online softmax (running log-sum-exp),
// so no rank ever holds the whole sequence's keys and values. With the zigzag split every
// step after the first is exactly half of a full block on every rank:
//   step 0, own shard:        causal attention over the rank's two chunks
//   shard of a lower rank:    all queries against its first chunk, no mask
//   shard of a higher rank:   the second query chunk against both of its chunks, no mask
// Backward runs the ring again: each block's gradients come from the final output and
// log-sum-exp (what flash attention's backward needs), and the key/value gradients travel with
// their shard until they are back with the rank that owns it.
#include <torch/types.h>

#include "core/dist/group.h"

namespace colossal::parallel {

/// q [B, H, T_local, D], k and v [B, H_kv, T_local, D] (H a multiple of H_kv: grouped-query
/// attention); returns [B, H, T_local, D]. Scale 1/sqrt(D). A group of one is plain causal
/// attention.
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const dist::Group& group);

}  // namespace colossal::parallel
