// Built instead of the .cu files when COLOSSAL_WITH_CUDA is OFF: every entry point exists and
// says why it cannot run (callers never branch on the build; a CUDA tensor cannot exist then).
#include <stdexcept>
#include <string>

#include "kernels/cuda/adamw.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/paged_attention.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"

namespace colossal::kernels::cuda {
namespace {
[[noreturn]] void unavailable(const char* kernel) {
  throw std::runtime_error(std::string("[cuda] ") + kernel +
                           ": this build has no CUDA kernels (configure with nvcc present, COLOSSAL_WITH_CUDA=ON)");
}
}  // namespace

bool built() { return false; }
int64_t adamw_plan(AdamWTensor*, int) { unavailable("adamw_plan"); }
void adamw_multi_tensor(const AdamWTensor*, int, int64_t, Stream) { unavailable("adamw_multi_tensor"); }
void rms_norm_forward(const RmsNormShape&, const void*, const void*, float, void*, float*, Stream) {
  unavailable("rms_norm_forward");
}
int64_t rms_norm_backward_workspace(const RmsNormShape&) { unavailable("rms_norm_backward"); }
void rms_norm_backward(const RmsNormShape&, const void*, const void*, const void*, const float*, void*, void*, float*,
                       Stream) {
  unavailable("rms_norm_backward");
}
void rope(const RopeShape&, const void*, const float*, const float*, const int64_t*, void*, bool, Stream) {
  unavailable("rope");
}
void swiglu_forward(const SwigluShape&, const void*, const void*, void*, Stream) { unavailable("swiglu_forward"); }
void swiglu_backward(const SwigluShape&, const void*, const void*, const void*, void*, void*, Stream) {
  unavailable("swiglu_backward");
}
void cross_entropy_rows(void*, const CrossEntropyRows&, Stream) { unavailable("cross_entropy_rows"); }
void paged_attention(const PagedAttentionArgs&, Stream) { unavailable("paged_attention"); }
int64_t paged_attention_workspace(const PagedAttentionArgs&) { unavailable("paged_attention_workspace"); }

}  // namespace colossal::kernels::cuda
