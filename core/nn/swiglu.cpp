#include "core/nn/swiglu.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "core/cuda/ops.h"

namespace colossal::nn {
namespace {

struct SwigluCudaFunction : torch::autograd::Function<SwigluCudaFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                               const torch::Tensor& up) {
    ctx->save_for_backward({gate, up});
    return cuda::swiglu_forward(gate, up);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [dg, du] = cuda::swiglu_backward(grads[0], saved[0], saved[1]);
    return {dg, du};
  }
};

}  // namespace

torch::Tensor swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  if (gate.is_cuda() && up.device() == gate.device() && up.scalar_type() == gate.scalar_type() &&
      gate.sizes() == up.sizes() && gate.scalar_type() != torch::kDouble) {
    return SwigluCudaFunction::apply(gate, up);
  }
  return torch::silu(gate) * up;
}

}  // namespace colossal::nn
