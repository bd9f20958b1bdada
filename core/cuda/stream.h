#pragma once
// LibTorch's current CUDA stream for a device, as the raw cudaStream_t the kernels take. Its own
// file because it needs the CUDA headers (built with COLOSSAL_WITH_CUDA; no_stream.cpp otherwise).
#include <c10/core/Device.h>

namespace colossal::cuda {

void* current_stream(const c10::Device& device);

}  // namespace colossal::cuda
