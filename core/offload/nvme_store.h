#pragma once
// NvmeStore: one file per process in a directory the user names, holding tensors that do not fit
// (or should not live) in memory — optimizer state and ZeRO-3 parameter shards — read and written
// through io_uring so the optimizer step overlaps the IO.
//
// The whole size is reserved up front (fallocate), so a full disk or an unwritable directory is
// a clear error before training starts, not a failure mid-step. The file is unlinked as soon as
// it is open: it lives exactly as long as the process, and nothing is left behind after an
// exit, a crash or a kill -9.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "core/offload/io_ring.h"

namespace colossal::offload {

class NvmeStore {
 public:
  /// Reserves `bytes` in a new file under `dir`; throws naming the directory and the shortfall.
  NvmeStore(const std::string& dir, int64_t bytes, const std::string& tag = "");
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  /// A region of `bytes` (4 KiB aligned) inside the reservation; returns its offset.
  int64_t allocate(int64_t bytes);

  /// Asynchronous copies between a contiguous CPU tensor and the region at `offset`; the tensor
  /// must stay alive until the ticket is waited for.
  uint64_t write_async(const at::Tensor& src, int64_t offset);
  uint64_t read_async(at::Tensor& dst, int64_t offset);
  void wait(uint64_t ticket) { ring_.wait(ticket); }
  void wait_all() { ring_.wait_all(); }
  void write(const at::Tensor& src, int64_t offset) { wait(write_async(src, offset)); }
  void read(at::Tensor& dst, int64_t offset) { wait(read_async(dst, offset)); }

  int64_t reserved_bytes() const { return reserved_; }
  int64_t used_bytes() const { return used_; }
  int64_t bytes_written() const { return written_; }
  int64_t bytes_read() const { return read_; }
  const std::string& dir() const { return dir_; }
  bool uses_io_uring() const { return ring_.uses_io_uring(); }

 private:
  std::string dir_;
  int fd_ = -1;
  int64_t reserved_ = 0, used_ = 0, written_ = 0, read_ = 0;
  IoRing ring_;
};

}  // namespace colossal::offload
