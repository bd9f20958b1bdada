#pragma once
// Counts the bytes LibTorch holds on the host (and, on CUDA builds, the device): the current total
// and the peak since the last reset. The host side wraps LibTorch's CPU allocator, so it sees every
// tensor allocated after install() on any thread; tensors allocated before are not counted (their
// frees are not subtracted either). Off until installed: a tracer or tool installs it.
#include <cstdint>

namespace colossal::tools {

struct MemoryReading {
  int64_t current = 0;  // bytes held now
  int64_t peak = 0;     // the most held at once since the last reset_peak()
};

namespace host_memory {
/// Puts the counting allocator in front of LibTorch's CPU allocator (idempotent, never removed:
/// tensors it allocated must be freed through it).
void install();
bool installed();
MemoryReading read();
/// Sets the peak to the current total (a new window starts).
void reset_peak();
/// Raises the peak to at least `bytes` (restoring an enclosing window's peak after a nested one).
void raise_peak(int64_t bytes);
}  // namespace host_memory

namespace device_memory {
/// Whether a CUDA device is visible to this build (false on CPU-only builds).
bool available();
/// The caching allocator's allocated bytes on the current device (0 when unavailable).
MemoryReading read();
void reset_peak();
}  // namespace device_memory

}  // namespace colossal::tools
