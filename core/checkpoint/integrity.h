#pragma once
// Integrity of saved tensors: a CRC32C of every tensor's bytes (stored in the safetensors
// metadata when we write, verified when we read a file that has it) and a scan for NaN/Inf.
//
// CRC32C (the Castagnoli polynomial, as in iSCSI, ext4 and LevelDB) because x86-64 computes it
// in hardware (SSE4.2's crc32 instruction, several GB/s on one core), so a checksum costs less
// than reading the file; it catches every burst of up to 32 flipped bits and all odd-weight
// errors. It guards against damage, not against someone forging a file.
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace colossal::checkpoint {

/// CRC32C of `n` bytes, continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

/// "crc32c:<tensor name>" -> 8 lower-case hex digits, in a file's __metadata__.
std::string checksum_key(const std::string& tensor_name);
std::string format_checksum(uint32_t crc);

struct NonFinite {
  int64_t count = 0;
  int64_t first = -1;  // flat index of the first NaN or Inf
};
/// NaN/Inf among `numel` elements of a floating `dtype` at `data` (nullopt for none, and for
/// non-floating dtypes). Reads the bits, so it never traps and needs no temporary tensor.
std::optional<NonFinite> find_non_finite(const void* data, int64_t numel, c10::ScalarType dtype);

/// COLOSSAL_ALLOW_NONFINITE=1: load tensors holding NaN/Inf instead of refusing them.
bool non_finite_allowed();

}  // namespace colossal::checkpoint
