#include "core/zero/chunk_search.h"

#include <algorithm>

#include "core/common/check.h"

namespace colossal::zero {

ChunkSearchResult pack(const std::vector<int64_t>& sizes, int64_t chunk_elements) {
  ChunkSearchResult r;
  r.chunk_elements = chunk_elements;
  int64_t used = chunk_elements;  // forces a first chunk
  int64_t total = 0;
  for (int64_t s : sizes) {
    COLOSSAL_CHECK(s <= chunk_elements, "[gemini] a parameter of ", s,
                   " elements does not fit a chunk of ", chunk_elements);
    if (used + s > chunk_elements) {
      ++r.chunks;
      used = 0;
    }
    used += s;
    total += s;
  }
  r.wasted_elements = r.chunks * chunk_elements - total;
  return r;
}

void ChunkSearchOptions::validate() const {
  COLOSSAL_CHECK(min_elements >= 1 && min_elements <= max_elements, "[gemini] chunk search: expected 1 <= min_elements (",
                 min_elements, ") <= max_elements (", max_elements, ")");
  COLOSSAL_CHECK(interval >= 1, "[gemini] chunk search interval: expected >= 1, got ", interval);
  COLOSSAL_CHECK(ranks >= 1, "[gemini] chunk search ranks: expected >= 1, got ", ranks);
}

ChunkSearchResult search_chunk_size(const std::vector<int64_t>& sizes, const ChunkSearchOptions& o) {
  o.validate();
  COLOSSAL_CHECK(!sizes.empty(), "[gemini] no parameters to place in chunks");
  COLOSSAL_CHECK(o.ranks >= 1 && o.interval >= 1, "[gemini] chunk search: ranks and interval must be >= 1");
  auto round_up = [&](int64_t v) { return (v + o.ranks - 1) / o.ranks * o.ranks; };
  int64_t largest = *std::max_element(sizes.begin(), sizes.end());
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  // A model smaller than min_elements gets one chunk of its own size, not a mostly empty one.
  int64_t lo = round_up(std::max(largest, std::min(o.min_elements, total)));
  int64_t hi = std::max(lo, round_up(std::min(o.max_elements, total)));
  ChunkSearchResult best;
  best.wasted_elements = -1;
  for (int64_t size = lo; size <= hi;) {
    auto r = pack(sizes, size);
    if (best.wasted_elements < 0 || r.wasted_elements <= best.wasted_elements) best = r;
    int64_t next = round_up(size + o.interval);
    if (next <= size) break;
    size = next;
  }
  return best;
}

}  // namespace colossal::zero
