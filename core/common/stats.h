#pragma once
// Small statistics shared by the measuring code (layout search, trials, benchmarks).
#include <algorithm>
#include <vector>

namespace colossal {

/// The median of a series (the upper one of the middle two for an even count; 0 for none).
/// Timings on a shared machine have long upper tails; the median ignores them.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace colossal
