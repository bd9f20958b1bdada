// The host side of memory_meter.h: a CPU allocator that counts, in front of LibTorch's default.
#include <c10/core/CPUAllocator.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "core/tools/memory_meter.h"

namespace colossal::tools::host_memory {
namespace {

std::atomic<int64_t> g_current{0};
std::atomic<int64_t> g_peak{0};

void raise_to(int64_t bytes) {
  int64_t seen = g_peak.load(std::memory_order_relaxed);
  while (bytes > seen && !g_peak.compare_exchange_weak(seen, bytes, std::memory_order_relaxed)) {
  }
}

// Sizes by address: the pointers it hands out stay plain (context == data), so code that uses the
// allocator's raw interface still works. The map is sharded to keep threads apart.
class CountingAllocator final : public c10::Allocator {
 public:
  explicit CountingAllocator(c10::Allocator* base) : base_(base), base_delete_(base->raw_deleter()) {}

  c10::DataPtr allocate(size_t n) override {
    void* p = base_->raw_allocate(n);
    if (p != nullptr) {
      Shard& s = shard(p);
      {
        std::lock_guard<std::mutex> lock(s.mu);
        s.sizes[p] = static_cast<int64_t>(n);
      }
      raise_to(g_current.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed) + static_cast<int64_t>(n));
    }
    return {p, p, &CountingAllocator::free, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &CountingAllocator::free; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }

  static CountingAllocator* instance;

 private:
  struct Shard {
    std::mutex mu;
    std::unordered_map<void*, int64_t> sizes;
  };
  static constexpr int kShards = 64;
  Shard& shard(void* p) { return shards_[(reinterpret_cast<uintptr_t>(p) >> 6) % kShards]; }

  static void free(void* p) {
    if (p == nullptr) return;
    CountingAllocator* self = instance;
    Shard& s = self->shard(p);
    int64_t n = 0;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      auto it = s.sizes.find(p);
      if (it != s.sizes.end()) {
        n = it->second;
        s.sizes.erase(it);
      }
    }
    g_current.fetch_sub(n, std::memory_order_relaxed);
    self->base_delete_(p);
  }

  c10::Allocator* base_;
  c10::DeleterFnPtr base_delete_;
  Shard shards_[kShards];
};

CountingAllocator* CountingAllocator::instance = nullptr;
std::once_flag g_once;

}  // namespace

void install() {
  std::call_once(g_once, [] {
    // Never freed: tensors it allocated may outlive every other object.
    CountingAllocator::instance = new CountingAllocator(c10::GetDefaultCPUAllocator());
    c10::SetCPUAllocator(CountingAllocator::instance, /*priority=*/100);
  });
}

bool installed() { return CountingAllocator::instance != nullptr; }

MemoryReading read() { return {g_current.load(), std::max(g_peak.load(), g_current.load())}; }

void reset_peak() { g_peak.store(g_current.load()); }

void raise_peak(int64_t bytes) { raise_to(bytes); }

}  // namespace colossal::tools::host_memory
