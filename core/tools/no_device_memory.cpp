// device_memory on builds without CUDA: nothing to count.
#include "core/tools/memory_meter.h"

namespace colossal::tools::device_memory {
bool available() { return false; }
MemoryReading read() { return {}; }
void reset_peak() {}
}  // namespace colossal::tools::device_memory
