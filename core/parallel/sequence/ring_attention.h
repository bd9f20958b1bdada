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
/// attention. `window` > 0: a sliding window, query p sees keys (p - window, p]; shards wholly
/// behind every query's window are passed on without any work, blocks the window cuts are masked.
/// `scale` > 0 replaces 1/sqrt(D) (Gemma's query_pre_attn_scalar).
torch::Tensor ring_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const dist::Group& group, int64_t window = 0, double scale = 0);

/// [len, len] bool: true where query i sees key j (causal, within the last `window` positions).
torch::Tensor sliding_window_mask(int64_t len, int64_t window, const torch::Device& device);

}  // namespace colossal::parallel
