// All-reduce through core/dist versus the same call made directly on LibTorch's c10d process
// group, side by side in one run (alternating, so machine noise hits both alike).
//   colossal run --nproc_per_node 4 -- build/apps/bench_allreduce [--mib 64] [--reps 15]
// Prints one JSON line (rank 0): medians, bus bandwidth, and wrapper/raw throughput ratio.
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "apps/bench/bench_util.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace dist = colossal::dist;

using colossal::bench::median;
using colossal::bench::seconds;

namespace {

template <typename Fn>
double timed(const dist::Group& world, Fn&& fn) {
  dist::barrier(world);
  auto t0 = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t mib = 64;
    int reps = 15;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--mib")) mib = std::stoll(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
      else COLOSSAL_FAIL("unknown option '", argv[i], "' (expected --mib N, --reps N)");
    }
    dist::init();
    auto world = dist::world_group();
    int64_t numel = mib * 1024 * 1024 / 4;
    auto t = torch::ones({numel});
    auto backend = world.backend();

    auto raw = [&] {
      std::vector<at::Tensor> ts{t};
      backend->allreduce(ts)->wait();
    };
    auto wrapped = [&] { dist::all_reduce(t, world); };

    for (int i = 0; i < 2; ++i) {  // warm-up both paths
      raw();
      wrapped();
    }
    std::vector<double> raw_s, wrapped_s;
    for (int i = 0; i < reps; ++i) {
      // Alternate which goes first so neither always runs on a warmer cache.
      if (i % 2 == 0) {
        raw_s.push_back(timed(world, raw));
        wrapped_s.push_back(timed(world, wrapped));
      } else {
        wrapped_s.push_back(timed(world, wrapped));
        raw_s.push_back(timed(world, raw));
      }
    }
    double r = median(raw_s), w = median(wrapped_s);
    int n = dist::world_size();
    double bytes = static_cast<double>(numel) * 4;
    // Bus bandwidth as nccl-tests defines it for all-reduce: 2 (n-1)/n * size / time.
    auto busbw = [&](double s) { return 2.0 * (n - 1) / n * bytes / s / 1e9; };
    if (dist::rank() == 0) {
      std::printf(
          "{\"bench\":\"all_reduce\",\"ranks\":%d,\"mib\":%lld,\"dtype\":\"float32\",\"reps\":%d,"
          "\"backend\":\"%s\",\"raw_c10d_median_ms\":%.2f,\"core_dist_median_ms\":%.2f,"
          "\"raw_busbw_GBps\":%.3f,\"core_dist_busbw_GBps\":%.3f,"
          "\"throughput_ratio_core_over_raw\":%.3f}\n",
          n, static_cast<long long>(mib), reps, dist::backend_name().c_str(), r * 1e3, w * 1e3,
          busbw(r), busbw(w), r / w);
    }
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_allreduce: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
