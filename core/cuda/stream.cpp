#include "core/cuda/stream.h"

#include <c10/cuda/CUDAStream.h>

namespace colossal::cuda {

void* current_stream(const c10::Device& device) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
}

}  // namespace colossal::cuda
