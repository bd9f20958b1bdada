// Checkpoint throughput for a 1 GB model (fp32), side by side in one run with the raw speed of
// the same disk: plain write()+fsync of the same number of bytes. An asynchronous save blocks
// training only for the in-memory snapshot (reported as async_save_blocking_snapshot; its extra
// memory is one copy of the state), the writing then runs as fast as the synchronous save.
//   build/apps/bench_checkpoint [--mib 1024] [--reps 3] [--dir /tmp/colossal-bench-ckpt]
// Loads read through the page cache right after the save (what a resume on the same machine
// sees); they measure the reader's copy-out speed, not the device.
#include <fcntl.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/checkpoint/model_io.h"
#include "apps/bench/bench_util.h"
#include "core/common/check.h"

namespace ck = colossal::checkpoint;

using colossal::bench::median;
using colossal::bench::seconds;

namespace {

void raw_write(const std::string& path, const char* data, size_t bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  COLOSSAL_CHECK(fd >= 0, "cannot write ", path);
  size_t off = 0;
  while (off < bytes) {
    ssize_t n = ::write(fd, data + off, std::min<size_t>(bytes - off, 64 << 20));
    COLOSSAL_CHECK(n > 0, "write failed");
    off += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t mib = 1024;
    int reps = 3;
    std::string dir = "/tmp/colossal-bench-ckpt";
    for (int i = 1; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--mib")) mib = std::stoll(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--dir")) dir = argv[i + 1];
      else COLOSSAL_FAIL("unknown option '", argv[i], "' (expected --mib, --reps, --dir)");
    }
    (void)!std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
    // 64 tensors of mib/64 MiB each, like the layers of a model.
    ck::NamedTensors state;
    int64_t per = mib * 1024 * 1024 / 4 / 64;
    for (int i = 0; i < 64; ++i) state.emplace_back("layers." + std::to_string(i) + ".weight", torch::randn({per}));
    double gb = mib / 1024.0 * 1.073741824;  // GB (1e9 bytes)
    auto flat = torch::cat(std::vector<torch::Tensor>{state[0].second, state[1].second}).repeat({32});

    std::vector<double> raw, single, sharded, load_single, load_sharded, snapshot;
    for (int r = 0; r < reps; ++r) {
      raw.push_back(seconds([&] {
        raw_write(dir + "/raw.bin", static_cast<const char*>(flat.data_ptr()), flat.numel() * 4);
      }));
      single.push_back(seconds([&] { ck::save_model_state(state, dir + "/single"); }));
      sharded.push_back(seconds([&] {
        ck::save_model_state(state, dir + "/sharded", {.shard = true, .size_per_shard = 256 << 20});
      }));
      // What Booster::save_checkpoint(async) blocks training for: copying the state to memory.
      snapshot.push_back(seconds([&] {
        ck::NamedTensors copy;
        for (const auto& [n, t] : state) copy.emplace_back(n, t.clone());
      }));
      load_single.push_back(seconds([&] {
        ck::CheckpointReader reader(dir + "/single");
        for (const auto& n : reader.names()) (void)reader.load(n);
      }));
      load_sharded.push_back(seconds([&] {
        ck::CheckpointReader reader(dir + "/sharded");
        for (const auto& n : reader.names()) (void)reader.load(n);
      }));
    }
    auto line = [&](const char* what, double s) {
      std::printf("{\"bench\":\"checkpoint\",\"what\":\"%s\",\"GB\":%.3f,\"seconds\":%.3f,"
                  "\"GBps\":%.3f,\"vs_raw_disk_write\":%.2f}\n",
                  what, gb, s, gb / s, median(raw) / s);
    };
    line("raw_disk_write_fsync", median(raw));
    line("save_single_file", median(single));
    line("save_sharded_256MiB", median(sharded));
    line("async_save_blocking_snapshot", median(snapshot));
    line("load_single_file_page_cache", median(load_single));
    line("load_sharded_page_cache", median(load_sharded));
    (void)!std::system(("rm -rf '" + dir + "'").c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
