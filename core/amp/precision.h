#pragma once
// Precision policy: what a plugin stores, communicates and computes in.
//
//   precision  storage (working params, grads, communication)   master weights + moments
//   fp32       fp32                                              (the params themselves)
//   bf16       bf16                                              fp32
//   fp16       fp16 (+ dynamic loss scaling)                     fp32
//   fp8        bf16, with linear layers' products in FP8          fp32
//              (e4m3 forward, e5m2 gradients: amp/fp8_linear.h)
//
// The compute dtype rule: on CUDA, compute follows the precision. On CPU, compute follows it
// only when the processor has native support (bf16: AVX512_BF16 or AMX-BF16; fp16: AVX512_FP16),
// because emulated low-precision matrix products are several times slower than fp32 (~3 against
// ~73 GFLOP/s on an AVX2-only CPU); otherwise the model computes in fp32 and the precision only
// decides loss scaling (fp16). On the development machine (AVX512_BF16 + AMX) LibTorch measured
// 744 GFLOP/s bf16 against 209 fp32 for 1024^2 products, so bf16 compute is the faster choice there.
// COLOSSAL_CPU_COMPUTE=fp32 forces the fp32 fallback and =low the low precision even where it is
// emulated (to measure both choices, and to test low-precision memory on any CPU).
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace colossal::amp {

enum class Precision { kFp32, kBf16, kFp16, kFp8 };

/// "fp32" | "bf16" | "fp16" | "fp8"; anything else throws listing them.
Precision parse_precision(const std::string& name);
std::string precision_name(Precision p);
c10::ScalarType low_precision_dtype(Precision p);  // fp32 for kFp32, bf16 for kFp8

/// Whether this CPU multiplies matrices natively in `dtype` (bf16 or fp16).
bool cpu_has_native(c10::ScalarType dtype);
/// The dtype the model computes in for `precision` on `device` (the rule above).
c10::ScalarType compute_dtype(Precision precision, const c10::Device& device);

}  // namespace colossal::amp
