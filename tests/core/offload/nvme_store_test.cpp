// The NVMe store: round trips through io_uring, large transfers, and the errors a user meets
// before training starts (missing directory, not enough space).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/offload/nvme_store.h"
#include "tests/support/errors.h"

namespace colossal::offload {
namespace {

std::string dir() {
  std::string d = ::testing::TempDir() + "nvme_store_" + std::to_string(::getpid());
  ::mkdir(d.c_str(), 0755);
  return d;
}

TEST(NvmeStore, RoundTripsManyRegionsAsynchronously) {
  NvmeStore store(dir(), 64 << 20);
  EXPECT_TRUE(store.uses_io_uring()) << "io_uring works on this machine (the fallback is pread)";
  std::vector<torch::Tensor> src;
  std::vector<int64_t> offsets;
  std::vector<uint64_t> tickets;
  for (int i = 0; i < 20; ++i) {
    src.push_back(torch::randn({1000 + 37 * i}));
    offsets.push_back(store.allocate(src.back().numel() * 4));
    tickets.push_back(store.write_async(src.back(), offsets.back()));
  }
  for (auto t : tickets) store.wait(t);
  for (int i = 19; i >= 0; --i) {
    auto back = torch::empty_like(src[i]);
    store.read(back, offsets[i]);
    EXPECT_TRUE(torch::equal(back, src[i])) << "region " << i;
  }
  auto big = torch::randn({12 << 20});  // 48 MB in one request
  int64_t off = store.allocate(big.numel() * 4);
  store.write(big, off);
  auto back = torch::empty_like(big);
  store.read(back, off);
  EXPECT_TRUE(torch::equal(back, big));
  EXPECT_GE(store.bytes_written(), big.numel() * 4);
}

TEST(NvmeStore, ErrorsNameTheDirectoryAndTheShortfall) {
  auto msg = testing::error_message_of([] { NvmeStore s("/nonexistent/dir", 1 << 20); });
  EXPECT_NE(msg.find("nvme_dir '/nonexistent/dir' is not an existing directory"), std::string::npos) << msg;
  msg = testing::error_message_of([] { NvmeStore s(dir(), int64_t{1} << 55); });  // 32 PiB
  EXPECT_NE(msg.find("free; this process needs"), std::string::npos) << msg;
  msg = testing::error_message_of([] {
    NvmeStore s(dir(), 8192);
    s.allocate(4096);
    s.allocate(8192);
  });
  EXPECT_NE(msg.find("is too small for another 8192 bytes"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::offload
