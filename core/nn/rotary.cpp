#include "core/nn/rotary.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "core/cuda/ops.h"

namespace colossal::nn {
namespace {

torch::Tensor rotate_half(const torch::Tensor& x) {
  auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

struct RotaryCudaFunction : torch::autograd::Function<RotaryCudaFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, const torch::Tensor& positions) {
    ctx->save_for_backward({cos, sin, positions});
    return cuda::rope(x, cos, sin, positions, /*backward=*/false);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    return {cuda::rope(grads[0], saved[0], saved[1], saved[2], /*backward=*/true), torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor apply_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                           const torch::Tensor& positions) {
  if (x.is_cuda() && x.dim() == 4 && positions.dim() == 1 && x.scalar_type() != torch::kDouble) {
    return RotaryCudaFunction::apply(x, cos.to(x.device()), sin.to(x.device()), positions.to(x.device()));
  }
  // [T, 1, D], or [B, T, 1, D] for per-sequence positions.
  auto rows = [&](const torch::Tensor& table) {
    auto picked = table.index_select(0, positions.reshape({-1}));
    auto shape = positions.sizes().vec();
    shape.push_back(1);
    shape.push_back(table.size(1));
    return picked.view(shape).to(x.scalar_type());
  };
  auto c = rows(cos), s = rows(sin);
  return x * c + rotate_half(x) * s;
}

}  // namespace colossal::nn
