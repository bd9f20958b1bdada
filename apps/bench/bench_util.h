#pragma once
// Small helpers shared by the benchmark programs: timing, medians and the matrix-product rate.
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <ATen/Parallel.h>

#include "core/common/check.h"
#include "core/common/stats.h"
#include "kernels/cpu/matvec.h"

namespace colossal::bench {

using colossal::median;

/// Wall-clock seconds of one call.
template <typename Fn>
double seconds(Fn&& fn) {
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// GFLOP/s of an fp32 2048x2048 product on this process's threads, median of 3, the way the
/// PyTorch reference scripts measure it (apps/bench/matmul_rate.py): the MFU denominator, taken
/// in the same run as the figure it divides.
inline double matmul_gflops(torch::ScalarType dtype = torch::kFloat) {
  static std::map<torch::ScalarType, std::array<torch::Tensor, 3>> mats;
  auto& m = mats[dtype];
  if (!m[0].defined()) m = {torch::randn({2048, 2048}).to(dtype), torch::randn({2048, 2048}).to(dtype), torch::empty({2048, 2048}, dtype)};
  std::vector<double> t;
  for (int i = 0; i < 3; ++i) t.push_back(seconds([&] { torch::mm_out(m[2], m[0], m[1]); }));
  return 2.0 * 2048 * 2048 * 2048 / median(t) / 1e9;
}

/// Read bandwidth (GB/s) of this process's threads: a parallel streaming sum over 1 GiB with the
/// widest loads the CPU has, median of 5 after a first touch. The ceiling decode figures are held to.
inline double stream_read_gbps() {
  static torch::Tensor buffer = torch::ones({int64_t{256} << 20});
  const float* p = buffer.data_ptr<float>();
  const int64_t n = buffer.numel();
  std::vector<double> t;
  for (int i = 0; i < 6; ++i)
    t.push_back(seconds([&] {
      at::parallel_for(0, n, 1 << 20, [&](int64_t b, int64_t e) {
        volatile float s = kernels::cpu::stream_sum(p + b, e - b);
        (void)s;
      });
    }));
  t.erase(t.begin());
  return static_cast<double>(n) * 4.0 / median(t) / 1e9;
}

/// "a,b,,c" -> {"a", "b", "c"}: a comma-separated command-line list, empty items dropped.
inline std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
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
