#pragma once
// What every CUDA kernel entry point shares (no CUDA or LibTorch headers here, so C++ callers
// compiled without nvcc include these files). Pointers are device pointers; `Stream` is the
// cudaStream_t to launch on (the op layer in core/cuda passes LibTorch's current stream).
// Entry points throw std::runtime_error naming the kernel and the problem: a bad argument
// before launching, or the CUDA error the launch reported.
#include <cstdint>

namespace colossal::kernels::cuda {

enum class DType { f32, bf16, f16 };
using Stream = void*;  // a cudaStream_t

/// Whether this build has the CUDA kernels (false: every entry point throws saying so).
bool built();

}  // namespace colossal::kernels::cuda
