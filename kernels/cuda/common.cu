#include "kernels/cuda/common.h"

namespace colossal::kernels::cuda {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::f16: return "fp16";
  }
  return "?";
}

bool built() { return true; }

}  // namespace colossal::kernels::cuda
