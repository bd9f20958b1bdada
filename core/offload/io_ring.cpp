#include "core/offload/io_ring.h"

#include <liburing.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/common/check.h"
#include "core/common/log.h"

namespace colossal::offload {

struct IoRing::Ring {
  io_uring ring;
};

IoRing::IoRing(unsigned depth) : depth_(depth) {
  auto r = std::make_unique<Ring>();
  int rc = io_uring_queue_init(depth, &r->ring, 0);
  if (rc == 0) {
    ring_ = std::move(r);
  } else {
    static bool warned = false;
    if (!warned) {
      warned = true;
      COLOSSAL_LOG_WARN("[offload] io_uring is unavailable (", std::strerror(-rc),
                        "): NVMe offload falls back to synchronous pread/pwrite");
    }
  }
}

IoRing::~IoRing() {
  try {
    wait_all();
  } catch (const std::exception& e) {
    COLOSSAL_LOG_ERROR("[offload] ", e.what());
  }
  if (ring_) io_uring_queue_exit(&ring_->ring);
}

uint64_t IoRing::read(int fd, void* buf, size_t len, int64_t offset) {
  return submit(Request{fd, static_cast<char*>(buf), len, 0, offset, false});
}

uint64_t IoRing::write(int fd, const void* buf, size_t len, int64_t offset) {
  return submit(Request{fd, static_cast<char*>(const_cast<void*>(buf)), len, 0, offset, true});
}

uint64_t IoRing::submit(Request r) {
  uint64_t ticket = next_ticket_++;
  requests_.emplace(ticket, r);
  if (!ring_) {  // synchronous fallback
    auto& q = requests_.at(ticket);
    while (q.done < q.len) {
      ssize_t n = q.is_write ? ::pwrite(q.fd, q.buf + q.done, q.len - q.done, q.offset + q.done)
                             : ::pread(q.fd, q.buf + q.done, q.len - q.done, q.offset + q.done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        q.error = n < 0 ? errno : EIO;
        break;
      }
      q.done += n;
    }
    q.finished = true;
    return ticket;
  }
  queue(ticket);
  return ticket;
}

void IoRing::queue(uint64_t ticket) {
  while (in_flight_ >= depth_) reap_one();
  auto& q = requests_.at(ticket);
  io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
  while (sqe == nullptr) {
    reap_one();
    sqe = io_uring_get_sqe(&ring_->ring);
  }
  // Transfers larger than 1 GiB go in parts (the kernel caps a single transfer near 2 GiB).
  size_t part = std::min<size_t>(q.len - q.done, size_t{1} << 30);
  if (q.is_write) io_uring_prep_write(sqe, q.fd, q.buf + q.done, part, q.offset + q.done);
  else io_uring_prep_read(sqe, q.fd, q.buf + q.done, part, q.offset + q.done);
  io_uring_sqe_set_data64(sqe, ticket);
  int rc = io_uring_submit(&ring_->ring);
  COLOSSAL_CHECK(rc >= 0, "[offload] io_uring_submit failed: ", std::strerror(-rc));
  ++in_flight_;
}

void IoRing::reap_one() {
  io_uring_cqe* cqe = nullptr;
  int rc;
  do {
    rc = io_uring_wait_cqe(&ring_->ring, &cqe);
  } while (rc == -EINTR);
  COLOSSAL_CHECK(rc == 0, "[offload] io_uring_wait_cqe failed: ", std::strerror(-rc));
  uint64_t ticket = io_uring_cqe_get_data64(cqe);
  int res = cqe->res;
  io_uring_cqe_seen(&ring_->ring, cqe);
  --in_flight_;
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return;
  auto& q = it->second;
  if (res == -EINTR || res == -EAGAIN) {
    queue(ticket);
    return;
  }
  if (res <= 0) {
    q.error = res < 0 ? -res : EIO;
    q.finished = true;
    return;
  }
  q.done += static_cast<size_t>(res);
  if (q.done < q.len) queue(ticket);  // short transfer: the rest
  else q.finished = true;
}

void IoRing::wait(uint64_t ticket) {
  auto it = requests_.find(ticket);
  if (it == requests_.end()) return;
  while (!it->second.finished) reap_one();
  Request q = it->second;
  requests_.erase(it);
  COLOSSAL_CHECK(q.error == 0, "[offload] ", q.is_write ? "write" : "read", " of ", q.len,
                 " bytes at offset ", q.offset, " failed: ", std::strerror(q.error),
                 q.error == ENOSPC ? " (the offload directory's disk is full)" : "");
}

void IoRing::wait_all() {
  while (!requests_.empty()) wait(requests_.begin()->first);
}

}  // namespace colossal::offload
