#include "core/amp/precision.h"

#include "core/common/check.h"
#include "core/common/env.h"

namespace colossal::amp {

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  if (name == "fp16") return Precision::kFp16;
  if (name == "fp8") return Precision::kFp8;
  COLOSSAL_FAIL("[amp] precision: expected fp32, bf16, fp16 or fp8, got '", name, "'");
}

std::string precision_name(Precision p) {
  switch (p) {
    case Precision::kFp32: return "fp32";
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp8: return "fp8";
  }
  return "?";
}

c10::ScalarType low_precision_dtype(Precision p) {
  switch (p) {
    case Precision::kBf16:
    case Precision::kFp8: return c10::kBFloat16;  // what FP8 leaves outside the linear products
    case Precision::kFp16: return c10::kHalf;
    default: return c10::kFloat;
  }
}

bool cpu_has_native(c10::ScalarType dtype) {
  __builtin_cpu_init();
  if (dtype == c10::kBFloat16) {
    return __builtin_cpu_supports("avx512bf16") || __builtin_cpu_supports("amx-bf16");
  }
  if (dtype == c10::kHalf) return __builtin_cpu_supports("avx512fp16");
  return dtype == c10::kFloat;
}

c10::ScalarType compute_dtype(Precision precision, const c10::Device& device) {
  auto low = low_precision_dtype(precision);
  if (low == c10::kFloat || device.is_cuda()) return low;
  const std::string mode = env_string("COLOSSAL_CPU_COMPUTE").value_or("auto");
  COLOSSAL_CHECK(mode == "auto" || mode == "fp32" || mode == "low", "COLOSSAL_CPU_COMPUTE: expected auto, fp32 or low, got '",
                 mode, "'");
  if (mode == "fp32") return c10::kFloat;
  if (mode == "low") return low;  // emulated where the CPU has no native units: slow, but the same memory
  return cpu_has_native(low) ? low : c10::kFloat;
}

}  // namespace colossal::amp
