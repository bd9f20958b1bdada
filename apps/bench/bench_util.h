#pragma once
// Small helpers shared by the benchmark programs: timing and medians.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>
#include <vector>

#include "core/common/check.h"
#include "core/common/stats.h"

namespace colossal::bench {

using colossal::median;

/// Wall-clock seconds of one call.
template <typename Fn>
double seconds(Fn&& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// This program's own path (driver benchmarks relaunch themselves under `colossal run`).
inline std::string self_path() {
  char buf[4096];
  ssize_t len = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  COLOSSAL_CHECK(len > 0, "cannot find this program's path");
  return std::string(buf, static_cast<size_t>(len));
}

/// The command-line arguments, quoted for a shell, without the driver's own options
/// (`with_value` take the next argument too).
inline std::string passthrough_args(int argc, char** argv, const std::set<std::string>& with_value,
                                    const std::set<std::string>& flags = {}) {
  std::string out;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (with_value.count(arg)) { ++i; continue; }
    if (flags.count(arg)) continue;
    out += " '" + arg + "'";
  }
  return out;
}

}  // namespace colossal::bench
