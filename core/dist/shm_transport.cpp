#include "core/dist/shm_transport.h"

#include <ATen/ATen.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>

#include "core/common/check.h"
#include "core/common/env.h"
#include "core/common/log.h"

namespace colossal::dist::detail {

namespace {
constexpr int kMaxMembers = 64;
constexpr int64_t kMinSlotBytes = 256 << 10;
constexpr int64_t kAlign = 16;  // elements: keeps each member's part vector-friendly

struct alignas(64) Counter {
  std::atomic<uint32_t> value;
};
struct Descriptor {
  uint32_t op;
  int32_t dtype;
  int64_t numel;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex needs a plain 32-bit word");

int futex(std::atomic<uint32_t>* word, int op, uint32_t value, const timespec* timeout) {
  return static_cast<int>(::syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, value, timeout, nullptr, 0));
}

const char* op_name(uint32_t op) {
  switch (op) {
    case 1: return "all_reduce";
    case 2: return "reduce_scatter";
    case 3: return "all_gather";
  }
  return "?";
}

// Bounds of member p's part of a c-element chunk: n nearly equal, 16-element aligned pieces.
int64_t part_bound(int64_t c, int p, int n) {
  if (p <= 0) return 0;
  if (p >= n) return c;
  int64_t b = (c * p / n + kAlign - 1) / kAlign * kAlign;
  return std::min(b, c);
}

at::Tensor view(void* p, int64_t numel, at::ScalarType dtype) {
  return at::from_blob(p, {numel}, at::TensorOptions().dtype(dtype));
}
}  // namespace

struct ShmTransport::Segment {
  Counter arrived[kMaxMembers];
  alignas(64) Descriptor desc[2][kMaxMembers];
};

namespace {
size_t data_offset() { return (sizeof(ShmTransport::Segment) + 4095) / 4096 * 4096; }
}  // namespace

std::string ShmTransport::host_identity() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return std::string(host) + "/" + boot;
}

bool ShmTransport::enabled_by_environment() { return env_int("COLOSSAL_SHM").value_or(1) != 0; }

bool ShmTransport::supports(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || !t.is_contiguous() || t.is_sparse()) return false;
  auto d = t.scalar_type();
  return d == at::kFloat || d == at::kDouble || d == at::kBFloat16 || d == at::kHalf;
}

std::unique_ptr<ShmTransport> ShmTransport::connect(c10d::Store& store, int rank, int size, Options options) {
  COLOSSAL_CHECK(size >= 2 && size <= kMaxMembers, "[dist] shared memory: group of ", size,
                 " members (supported: 2 to ", kMaxMembers, ")");
  std::string name;
  int64_t slot = options.slot_bytes;
  if (rank == 0) {
    // /dev/shm is often small in containers: shrink the slots to a quarter of what is free,
    // and fall back to the network transport when even small ones do not fit.
    struct statvfs vfs {};
    if (::statvfs("/dev/shm", &vfs) == 0) {
      int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
      slot = std::min<int64_t>(slot, free_bytes / 4 / (2 * size)) / 4096 * 4096;
    }
    if (slot >= kMinSlotBytes) {
      std::random_device rd;
      name = "/colossal-" + std::to_string(::getpid()) + "-" + std::to_string(rd());
      size_t bytes = data_offset() + 2 * static_cast<size_t>(size) * static_cast<size_t>(slot);
      int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
      int err = fd < 0 ? errno : ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
      if (fd >= 0) ::close(fd);
      if (err != 0) {
        if (fd >= 0) ::shm_unlink(name.c_str());
        COLOSSAL_LOG_WARN("[dist] group '", options.group_name, "': no shared memory segment of ", bytes,
                          " bytes (", std::strerror(err), "); collectives use the network transport");
        name.clear();
      }
    }
    std::string msg = name + "|" + std::to_string(slot);
    store.set("shm/name", std::vector<uint8_t>(msg.begin(), msg.end()));
  } else {
    auto v = store.get("shm/name");
    std::string msg(v.begin(), v.end());
    auto bar = msg.find('|');
    name = msg.substr(0, bar);
    slot = std::stoll(msg.substr(bar + 1));
  }
  if (name.empty()) return nullptr;
  options.slot_bytes = slot;
  size_t bytes = data_offset() + 2 * static_cast<size_t>(size) * static_cast<size_t>(slot);
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  int err = errno;
  void* base = fd < 0 ? MAP_FAILED : ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED && fd >= 0) err = errno;
  if (fd >= 0) ::close(fd);
  // Count this member in before failing, so member 0 never waits for a member that gave up.
  store.add("shm/attached", 1);
  if (rank == 0) {
    auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (store.add("shm/attached", 0) < size && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ::shm_unlink(name.c_str());  // the mappings stay; nothing is left in /dev/shm
  }
  COLOSSAL_CHECK(base != MAP_FAILED, "[dist] group '", options.group_name, "': cannot map shared memory ", name,
                 ": ", std::strerror(err));
  return std::unique_ptr<ShmTransport>(new ShmTransport(rank, size, std::move(options), base, bytes));
}

ShmTransport::ShmTransport(int rank, int size, Options options, void* base, size_t bytes)
    : rank_(rank), size_(size), options_(std::move(options)), base_(base), bytes_(bytes) {
  header_ = static_cast<Segment*>(base_);
  data_ = static_cast<char*>(base_) + data_offset();
  worker_ = std::thread([this] { worker_loop(); });
}

ShmTransport::~ShmTransport() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  ::munmap(base_, bytes_);
}

void ShmTransport::abort() {
  aborted_.store(true);
  cv_.notify_all();
}

void* ShmTransport::slot(int set, int member) const {
  return data_ + (static_cast<size_t>(set) * size_ + member) * static_cast<size_t>(options_.slot_bytes);
}

void ShmTransport::arrive_and_wait(uint32_t generation) {
  auto& mine = header_->arrived[rank_].value;
  mine.store(generation, std::memory_order_release);
  futex(&mine, FUTEX_WAKE, INT32_MAX, nullptr);
  auto start = std::chrono::steady_clock::now();
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    auto& theirs = header_->arrived[p].value;
    int spins = 0;
    for (;;) {
      uint32_t seen = theirs.load(std::memory_order_acquire);
      if (static_cast<int32_t>(seen - generation) >= 0) break;
      if (aborted_.load()) COLOSSAL_FAIL("[dist] shared-memory transport of group '", options_.group_name, "' aborted");
      if (++spins < 2000) {
        __builtin_ia32_pause();
        continue;
      }
      // Sleep until the member moves (or 50 ms pass, to look at the clock and the abort flag).
      timespec ts{0, 50 * 1000 * 1000};
      futex(&theirs, FUTEX_WAIT, seen, &ts);
      if (std::chrono::steady_clock::now() - start > options_.timeout)
        COLOSSAL_FAIL("[dist] shared-memory transport of group '", options_.group_name, "': member ", p,
                      " did not arrive: timed out after ", options_.timeout.count() / 1000.0,
                      " s (COLOSSAL_DIST_TIMEOUT)");  // the wording of the Gloo path's timeout
    }
  }
}

void ShmTransport::check_agreement(int set, Op op, int64_t numel, int dtype) {
  for (int p = 0; p < size_; ++p) {
    const auto& d = header_->desc[set][p];
    COLOSSAL_CHECK(d.op == static_cast<uint32_t>(op) && d.numel == numel && d.dtype == dtype, "[dist] group '",
                   options_.group_name, "': members disagree: member ", rank_, " called ",
                   op_name(static_cast<uint32_t>(op)), " on ", numel, " elements of ",
                   c10::toString(static_cast<at::ScalarType>(dtype)), ", member ", p, " called ", op_name(d.op),
                   " on ", d.numel, " elements of ", c10::toString(static_cast<at::ScalarType>(d.dtype)));
  }
}

void ShmTransport::meet(int set, Op op, int64_t numel, at::ScalarType dtype, bool& first) {
  if (first) header_->desc[set][rank_] = {static_cast<uint32_t>(op), static_cast<int32_t>(dtype), numel};
  arrive_and_wait(++generation_);
  if (first) check_agreement(set, op, numel, static_cast<int>(dtype));
  first = false;
}

void ShmTransport::run_all_reduce(const at::Tensor& t, bool average) {
  const auto dtype = t.scalar_type();
  const int64_t es = t.element_size(), n = t.numel(), max_chunk = options_.slot_bytes / es;
  char* data = static_cast<char*>(t.data_ptr());
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t c = std::min(max_chunk, n - off);
    const int set = static_cast<int>(round_++ & 1);
    std::memcpy(slot(set, rank_), data + off * es, c * es);
    meet(set, Op::kAllReduce, n, dtype, first);
    // Reduce this member's part across every member's copy, in place in its own slot.
    int64_t lo = part_bound(c, rank_, size_), hi = part_bound(c, rank_ + 1, size_);
    if (hi > lo) {
      auto acc = view(static_cast<char*>(slot(set, rank_)) + lo * es, hi - lo, dtype);
      for (int p = 0; p < size_; ++p)
        if (p != rank_) acc.add_(view(static_cast<char*>(slot(set, p)) + lo * es, hi - lo, dtype));
      if (average) acc.div_(size_);
    }
    arrive_and_wait(++generation_);
    for (int p = 0; p < size_; ++p) {
      int64_t plo = part_bound(c, p, size_), phi = part_bound(c, p + 1, size_);
      std::memcpy(data + (off + plo) * es, static_cast<char*>(slot(set, p)) + plo * es, (phi - plo) * es);
    }
    off += c;
  } while (off < n);
}

void ShmTransport::run_reduce_scatter(const at::Tensor& out, const at::Tensor& in, bool average) {
  const auto dtype = out.scalar_type();
  const int64_t es = out.element_size(), m = out.numel(), max_chunk = options_.slot_bytes / es / size_;
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t c = std::min(max_chunk, m - off);
    const int set = static_cast<int>(round_++ & 1);
    char* mine = static_cast<char*>(slot(set, rank_));
    for (int p = 0; p < size_; ++p) std::memcpy(mine + p * c * es, src + (p * m + off) * es, c * es);
    meet(set, Op::kReduceScatter, m, dtype, first);
    if (c > 0) {
      auto o = view(dst + off * es, c, dtype);
      o.copy_(view(mine + rank_ * c * es, c, dtype));
      for (int p = 0; p < size_; ++p)
        if (p != rank_) o.add_(view(static_cast<char*>(slot(set, p)) + rank_ * c * es, c, dtype));
      if (average) o.div_(size_);
    }
    off += c;
  } while (off < m);
}

void ShmTransport::run_all_gather(const at::Tensor& out, const at::Tensor& in) {
  const auto dtype = in.scalar_type();
  const int64_t es = in.element_size(), m = in.numel(), max_chunk = options_.slot_bytes / es;
  const char* src = static_cast<const char*>(in.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  int64_t off = 0;
  bool first = true;
  do {
    const int64_t c = std::min(max_chunk, m - off);
    const int set = static_cast<int>(round_++ & 1);
    std::memcpy(slot(set, rank_), src + off * es, c * es);
    meet(set, Op::kAllGather, m, dtype, first);
    for (int p = 0; p < size_; ++p) std::memcpy(dst + (p * m + off) * es, slot(set, p), c * es);
    off += c;
  } while (off < m);
}

c10::intrusive_ptr<c10::ivalue::Future> ShmTransport::enqueue(std::vector<at::Tensor> result, Task task) {
  auto future = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back([future, result = std::move(result), task = std::move(task)]() mutable {
      try {
        task();
      } catch (...) {
        future->setError(std::current_exception());
        return;
      }
      future->markCompleted(c10::IValue(std::move(result)));
    });
  }
  cv_.notify_one();
  return future;
}

void ShmTransport::worker_loop() {
  for (;;) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();  // a failure (abort included) goes to the task's future
  }
}

c10::intrusive_ptr<c10::ivalue::Future> ShmTransport::all_reduce(at::Tensor tensor, bool average) {
  return enqueue({tensor}, [this, tensor, average] { run_all_reduce(tensor, average); });
}

c10::intrusive_ptr<c10::ivalue::Future> ShmTransport::reduce_scatter(at::Tensor output, at::Tensor input,
                                                                     bool average) {
  return enqueue({output}, [this, output, input, average] { run_reduce_scatter(output, input, average); });
}

c10::intrusive_ptr<c10::ivalue::Future> ShmTransport::all_gather(at::Tensor output, at::Tensor input) {
  return enqueue({output}, [this, output, input] { run_all_gather(output, input); });
}

}  // namespace colossal::dist::detail
