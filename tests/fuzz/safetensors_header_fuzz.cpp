// libFuzzer target for the safetensors header parser: any byte string must either parse into
// tensors whose offsets lie inside the data section, or be rejected with a c10::Error — never a
// crash, hang, out-of-bounds read or other exception (ASan and UBSan watch).
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdlib>

#include "core/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    uint64_t header_len = 0;
    auto tensors = colossal::checkpoint::parse_file_bytes(data, size, "fuzz input", nullptr,
                                                          &header_len);
    const uint64_t data_bytes = size - 8 - header_len;
    for (const auto& t : tensors) {
      if (t.begin < 0 || t.end < t.begin || static_cast<uint64_t>(t.end) > data_bytes) std::abort();
    }
  } catch (const c10::Error&) {
    // A clear rejection is the correct outcome for malformed input.
  }
  return 0;
}
