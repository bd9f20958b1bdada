#pragma once
// Device-side helpers shared by the .cu files: loads and stores in each storage type (math is
// always fp32), warp and block sums, and the launch check.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda::detail {

template <typename T>
__device__ __forceinline__ float to_float(T v);
template <>
__device__ __forceinline__ float to_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ float to_float<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float to_float<__half>(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

/// v rounded to T and back: the value a tensor of T would hold.
template <typename T>
__device__ __forceinline__ float round_to(float v) { return to_float<T>(from_float<T>(v)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

/// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
/// `scratch` holds 32 floats; the call synchronises the block.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

inline cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s); }

/// Throws naming the kernel when the launch (or an earlier asynchronous error) failed.
inline void check_launch(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("[cuda] ") + kernel + ": " + cudaGetErrorString(e));
}
inline void require(bool ok, const char* kernel, const std::string& what) {
  if (!ok) throw std::runtime_error(std::string("[cuda] ") + kernel + ": " + what);
}

/// Calls fn with a value of the storage type `t` names (for picking a template instance).
template <typename Fn>
void dispatch(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: fn(float{}); break;
    case DType::bf16: fn(__nv_bfloat16{}); break;
    case DType::f16: fn(__half{}); break;
  }
}

}  // namespace colossal::kernels::cuda::detail
