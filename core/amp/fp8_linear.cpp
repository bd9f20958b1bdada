#include "core/amp/fp8_linear.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "core/common/check.h"

namespace colossal::amp {

void Fp8LinearOptions::validate() const {
  COLOSSAL_CHECK(history >= 1, "[fp8] fp8_history must be >= 1, got ", history);
  COLOSSAL_CHECK(margin >= 0 && margin <= 16, "[fp8] fp8_margin must be in [0, 16], got ", margin);
}

Fp8LinearState::Fp8LinearState(const Fp8LinearOptions& o)
    : input(Fp8Format::kE4M3, o.scaling, o.history, o.margin),
      weight(Fp8Format::kE4M3, o.scaling, o.history, o.margin),
      grad_output(Fp8Format::kE5M2, o.scaling, o.history, o.margin) {
  o.validate();
}

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct StateHolder : torch::CustomClassHolder {
  explicit StateHolder(std::shared_ptr<Fp8LinearState> s) : state(std::move(s)) {}
  std::shared_ptr<Fp8LinearState> state;
};

struct Fp8Matmul : torch::autograd::Function<Fp8Matmul> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& w,
                               c10::intrusive_ptr<StateHolder> holder) {
    auto& s = *holder->state;
    auto qx = s.input.quantize(x), qw = s.weight.quantize(w);
    auto y = torch::matmul(qx.dequantize(), qw.dequantize().t()).to(x.scalar_type());
    ctx->save_for_backward({qx.data, qx.scale, qw.data, qw.scale});
    ctx->saved_data["state"] = c10::IValue::make_capsule(holder);
    ctx->saved_data["x_dtype"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["w_dtype"] = static_cast<int64_t>(w.scalar_type());
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* holder = static_cast<StateHolder*>(ctx->saved_data["state"].toCapsule().get());
    auto saved = ctx->get_saved_variables();
    const Fp8Tensor qx{saved[0], saved[1], Fp8Format::kE4M3}, qw{saved[2], saved[3], Fp8Format::kE4M3};
    auto g = holder->state->grad_output.quantize(grads[0]).dequantize();
    auto x = qx.dequantize(), w = qw.dequantize();
    auto dx = torch::matmul(g, w).to(static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt()));
    auto dw = g.reshape({-1, g.size(-1)}).t().mm(x.reshape({-1, x.size(-1)}));
    return {dx, dw.to(static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt())), torch::Tensor()};
  }
};

}  // namespace

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                      const std::shared_ptr<Fp8LinearState>& state) {
  COLOSSAL_CHECK(state != nullptr, "[fp8] fp8_linear needs the layer's scaling state");
  COLOSSAL_CHECK(weight.dim() == 2 && x.size(-1) == weight.size(1), "[fp8] linear: input ", x.sizes(),
                 " against a weight of ", weight.sizes());
  auto y = Fp8Matmul::apply(x, weight, c10::make_intrusive<StateHolder>(state));
  return bias.defined() ? y + bias.to(y.scalar_type()) : y;
}

}  // namespace colossal::amp
