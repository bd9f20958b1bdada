// Chosen by CMake when COLOSSAL_WITH_CUDA is ON. The only translation unit with NCCL headers.
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#include <torch/cuda.h>

#include "core/common/check.h"
#include "core/dist/backend_factory.h"

namespace colossal::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>& store,
                                                    int rank, int size,
                                                    const BackendOptions& options) {
  COLOSSAL_CHECK(torch::cuda::is_available(),
                 "[dist] backend 'nccl' requested, but no CUDA device is visible");
  auto opts = c10d::ProcessGroupNCCL::Options::create();
  opts->timeout = options.timeout;
  auto pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, opts);
  return c10::static_intrusive_pointer_cast<c10d::Backend>(pg);
}

bool nccl_available() { return torch::cuda::is_available(); }

}  // namespace colossal::dist
