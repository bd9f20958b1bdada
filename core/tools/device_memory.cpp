// device_memory on CUDA builds: the caching allocator's own statistics for the current device.
// (Written for the GPU path; not yet run on a GPU.)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

#include "core/tools/memory_meter.h"

namespace colossal::tools::device_memory {

bool available() { return c10::cuda::device_count() > 0; }

MemoryReading read() {
  if (!available()) return {};
  auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
  const auto& all = stats.allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)];
  return {all.current, all.peak};
}

void reset_peak() {
  if (available()) c10::cuda::CUDACachingAllocator::resetPeakStats(c10::cuda::current_device());
}

}  // namespace colossal::tools::device_memory
