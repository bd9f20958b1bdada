// Chosen by CMake when COLOSSAL_WITH_CUDA is OFF (nccl_backend.cpp otherwise).
#include "core/common/check.h"
#include "core/dist/backend_factory.h"

namespace colossal::dist {

c10::intrusive_ptr<c10d::Backend> make_nccl_backend(const c10::intrusive_ptr<c10d::Store>&, int,
                                                    int, const BackendOptions&) {
  COLOSSAL_FAIL("[dist] backend 'nccl' requested, but this build has no CUDA; rebuild with "
                "-DCOLOSSAL_WITH_CUDA=ON");
}

bool nccl_available() { return false; }

}  // namespace colossal::dist
