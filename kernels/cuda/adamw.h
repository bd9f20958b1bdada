#pragma once
// Multi-tensor AdamW on the GPU: every parameter of a step in ONE launch. The host builds a
// table with one entry per parameter (pointers, size, its step's coefficients) and copies it to
// the device; blocks walk fixed-size chunks of all tensors together, finding their tensor by a
// binary search over the entries' first chunks. The per-element arithmetic is the CPU kernel's
// (kernels/cpu/adamw), rounding step by step, with no fused multiply-add the CPU does not do,
// so GPU and CPU give the same bits.
#include <cstdint>

#include "kernels/cpu/adamw.h"
#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

struct AdamWTensor {
  float* param = nullptr;       // fp32 parameter (or master)
  float* exp_avg = nullptr;     // fp32
  float* exp_avg_sq = nullptr;  // fp32
  const void* grad = nullptr;   // fp32, or bf16 when grad_bf16
  uint16_t* working = nullptr;  // bf16 copy rewritten from the updated param, or null
  int64_t size = 0;
  int64_t first_chunk = 0;      // filled by adamw_plan: chunks of the entries before this one
  int32_t grad_bf16 = 0;
  cpu::detail::AdamWCoefficients c{};
};

/// Elements per chunk (one block's unit of work).
constexpr int64_t kAdamWChunk = 8192;

/// Sets each entry's first_chunk; returns the total number of chunks.
int64_t adamw_plan(AdamWTensor* table, int count);
/// Updates every tensor of `device_table` (count entries, planned, in device memory).
void adamw_multi_tensor(const AdamWTensor* device_table, int count, int64_t total_chunks, Stream stream);

}  // namespace colossal::kernels::cuda
