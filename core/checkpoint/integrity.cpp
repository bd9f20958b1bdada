#include "core/checkpoint/integrity.h"

#include <ATen/Parallel.h>

#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>

#include "core/common/env.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace colossal::checkpoint {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // Castagnoli, bit-reflected

std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t crc32c_portable(const uint8_t* p, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  for (size_t i = 0; i < n; ++i) crc = table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t crc) {
  uint64_t c = crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
  }
  for (; n > 0; --n) c = _mm_crc32_u8(static_cast<uint32_t>(c), *p++);
  return static_cast<uint32_t>(c);
}
#endif

// Exponent bits all ones = Inf or NaN, for each IEEE width (bf16 is the top half of f32).
template <typename Word>
void scan(const Word* w, int64_t numel, Word exponent_mask, NonFinite& out) {
  std::atomic<int64_t> count{0}, first{INT64_MAX};
  at::parallel_for(0, numel, int64_t{1} << 20, [&](int64_t begin, int64_t end) {
    int64_t local = 0;
    for (int64_t i = begin; i < end; ++i) local += (w[i] & exponent_mask) == exponent_mask;
    if (local == 0) return;
    count += local;
    for (int64_t i = begin; i < end; ++i) {
      if ((w[i] & exponent_mask) == exponent_mask) {
        int64_t seen = first.load();
        while (i < seen && !first.compare_exchange_weak(seen, i)) {
        }
        break;
      }
    }
  });
  out.count = count.load();
  out.first = out.count ? first.load() : -1;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  crc = hardware ? crc32c_sse42(p, n, crc) : crc32c_portable(p, n, crc);
#else
  crc = crc32c_portable(p, n, crc);
#endif
  return ~crc;
}

std::string checksum_key(const std::string& tensor_name) { return "crc32c:" + tensor_name; }

std::string format_checksum(uint32_t crc) {
  char buf[9];
  std::snprintf(buf, sizeof(buf), "%08x", crc);
  return buf;
}

std::optional<NonFinite> find_non_finite(const void* data, int64_t numel, c10::ScalarType dtype) {
  NonFinite out;
  switch (dtype) {
    case c10::kFloat:
      scan(static_cast<const uint32_t*>(data), numel, uint32_t{0x7f800000u}, out);
      break;
    case c10::kDouble:
      scan(static_cast<const uint64_t*>(data), numel, uint64_t{0x7ff0000000000000ull}, out);
      break;
    case c10::kBFloat16:
      scan(static_cast<const uint16_t*>(data), numel, uint16_t{0x7f80u}, out);
      break;
    case c10::kHalf:
      scan(static_cast<const uint16_t*>(data), numel, uint16_t{0x7c00u}, out);
      break;
    default:
      return std::nullopt;
  }
  if (out.count == 0) return std::nullopt;
  return out;
}

bool non_finite_allowed() { return env_int("COLOSSAL_ALLOW_NONFINITE").value_or(0) != 0; }

}  // namespace colossal::checkpoint
