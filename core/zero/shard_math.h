#pragma once
// Even sharding of a flattened tensor over N ranks: padded to a multiple of N, rank r owns
// elements [r * shard, (r + 1) * shard) of the padded range, of which owned_length are real.
#include <algorithm>
#include <cstdint>

namespace colossal::zero {

inline int64_t shard_size(int64_t numel, int64_t ranks) { return (numel + ranks - 1) / ranks; }

inline int64_t owned_length(int64_t numel, int64_t shard, int64_t rank) {
  return std::clamp<int64_t>(numel - rank * shard, 0, shard);
}

}  // namespace colossal::zero
