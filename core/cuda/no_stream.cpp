// Without COLOSSAL_WITH_CUDA no CUDA tensor reaches the op layer; asking for a stream says why.
#include "core/common/check.h"
#include "core/cuda/stream.h"

namespace colossal::cuda {

void* current_stream(const c10::Device& device) {
  COLOSSAL_FAIL("[cuda] a tensor on ", device, " reached a CUDA kernel, but this build has none (COLOSSAL_WITH_CUDA=OFF)");
}

}  // namespace colossal::cuda
