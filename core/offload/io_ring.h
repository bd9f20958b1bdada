#pragma once
// Asynchronous file reads and writes through io_uring (liburing). Requests are queued and run
// by the kernel while the caller computes; wait(ticket) blocks for one of them. Short reads and
// writes are resubmitted for the remainder; an error names the operation, offset and errno.
// When io_uring is unavailable (an old kernel, a seccomp policy) the ring falls back to
// synchronous pread/pwrite and says so once.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

namespace colossal::offload {

class IoRing {
 public:
  explicit IoRing(unsigned depth = 64);
  ~IoRing();
  IoRing(const IoRing&) = delete;
  IoRing& operator=(const IoRing&) = delete;

  /// Queues a transfer of `len` bytes between `buf` and the file at `offset`; the buffer must
  /// stay valid until the ticket is waited for.
  uint64_t read(int fd, void* buf, size_t len, int64_t offset);
  uint64_t write(int fd, const void* buf, size_t len, int64_t offset);
  void wait(uint64_t ticket);
  void wait_all();
  bool uses_io_uring() const { return ring_ != nullptr; }

 private:
  struct Request {
    int fd;
    char* buf;
    size_t len, done = 0;
    int64_t offset;
    bool is_write;
    bool finished = false;
    int error = 0;
  };
  uint64_t submit(Request r);
  void queue(uint64_t ticket);
  void reap_one();
  struct Ring;
  std::unique_ptr<Ring> ring_;
  std::map<uint64_t, Request> requests_;
  uint64_t next_ticket_ = 1;
  unsigned in_flight_ = 0, depth_;
};

}  // namespace colossal::offload
