#pragma once
// Small helpers shared by the benchmark programs: timing and medians.
#include <algorithm>
#include <chrono>
#include <vector>

namespace colossal::bench {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// Wall-clock seconds of one call.
template <typename Fn>
double seconds(Fn&& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace colossal::bench
