#pragma once
// Choosing the ZeRO-3 chunk size. Parameters are packed into chunks in order (one that does not
// fit in the current chunk starts the next); a chunk's unused tail is padding that every rank
// stores and communicates. The search tries sizes from the largest parameter (rounded up to a
// multiple of the data-parallel size) to max_elements (at most the whole model) in steps of `interval` and keeps the one
// with the least padding; ties go to the larger size (fewer, larger collectives).
#include <cstdint>
#include <vector>

namespace colossal::zero {

struct ChunkSearchOptions {
  int64_t min_elements = 1 << 20;     // lower bound of the search (raised to the largest param)
  int64_t max_elements = 64 << 20;    // upper bound
  int64_t interval = 1 << 16;         // step between candidates
  int64_t ranks = 1;                  // chunk sizes are multiples of this
  void validate() const;              // 1 <= min <= max, interval >= 1, ranks >= 1
};

struct ChunkSearchResult {
  int64_t chunk_elements = 0;
  int64_t chunks = 0;
  int64_t wasted_elements = 0;  // padding over all chunks
};

/// Packs `sizes` in order into chunks of `chunk_elements`; returns where each starts a chunk.
ChunkSearchResult pack(const std::vector<int64_t>& sizes, int64_t chunk_elements);
ChunkSearchResult search_chunk_size(const std::vector<int64_t>& sizes, const ChunkSearchOptions& options);

}  // namespace colossal::zero
