#include "core/amp/fp8_linear.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <atomic>

#include "core/common/check.h"
#include "core/common/log.h"

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

// Whether this process's GPU multiplies FP8 natively: unknown until the first try, then kept.
std::atomic<int> g_native_fp8{-1};

bool native_shape(const at::Tensor& a, const at::Tensor& b) {
  return a.size(0) % 16 == 0 && a.size(1) % 16 == 0 && b.size(0) % 16 == 0;
}

}  // namespace

at::Tensor fp8_matmul_nt(const Fp8Tensor& a, const Fp8Tensor& b, c10::ScalarType out_dtype) {
  COLOSSAL_CHECK(a.data.dim() == 2 && b.data.dim() == 2 && a.data.size(1) == b.data.size(1), "[fp8] fp8_matmul_nt: ",
                 a.data.sizes(), " against ", b.data.sizes(), " (a [m, k] and b [n, k])");
  if (a.data.is_cuda() && g_native_fp8.load() != 0 && native_shape(a.data, b.data)) {
    try {
      // _scaled_mm: (A x scale_a) (B x scale_b) with B column-major; its scales dequantize, ours
      // quantize. b's transpose of a row-major [n, k] is the column-major [k, n] it wants.
      auto y = at::_scaled_mm(a.data.contiguous(), b.data.contiguous().t(), a.scale.reciprocal().to(a.data.device()),
                              b.scale.reciprocal().to(b.data.device()), std::nullopt, std::nullopt, out_dtype);
      g_native_fp8.store(1);
      return y;
    } catch (const c10::Error& e) {
      if (g_native_fp8.exchange(0) != 0)
        COLOSSAL_LOG_WARN("[fp8] this GPU does not multiply FP8 natively (", e.what_without_backtrace(),
                          "): FP8 products are emulated in fp32 from now on");
    }
  }
  return torch::matmul(a.dequantize(), b.dequantize().t()).to(out_dtype);
}

at::Tensor fp8_linear_output(const Fp8Tensor& x, const Fp8Tensor& w, c10::ScalarType dtype) {
  auto rows = x.data.sizes().vec();
  rows.back() = w.data.size(0);
  return fp8_matmul_nt({x.data.reshape({-1, x.data.size(-1)}), x.scale, x.format}, w, dtype).reshape(rows);
}

std::pair<at::Tensor, at::Tensor> fp8_linear_gradients(const Fp8Tensor& g, const Fp8Tensor& x, const Fp8Tensor& w,
                                                       c10::ScalarType x_dtype, c10::ScalarType w_dtype) {
  const int64_t out = w.data.size(0), in = w.data.size(1);
  const Fp8Tensor g2{g.data.reshape({-1, out}), g.scale, g.format}, x2{x.data.reshape({-1, in}), x.scale, x.format};
  // dx = g W (b = W^T [in, out]); dW = g^T x (a = g^T [out, m], b = x^T [in, m]). Transposed views:
  // only the native path needs them laid out (it makes its operands contiguous itself).
  auto dx = fp8_matmul_nt(g2, {w.data.t(), w.scale, w.format}, x_dtype).reshape(x.data.sizes());
  auto dw = fp8_matmul_nt({g2.data.t(), g2.scale, g2.format}, {x2.data.t(), x2.scale, x2.format}, w_dtype);
  return {dx, dw};
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
    auto y = fp8_linear_output(qx, qw, x.scalar_type());
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
    auto g = holder->state->grad_output.quantize(grads[0]);
    auto [dx, dw] = fp8_linear_gradients(g, qx, qw, static_cast<c10::ScalarType>(ctx->saved_data["x_dtype"].toInt()),
                                         static_cast<c10::ScalarType>(ctx->saved_data["w_dtype"].toInt()));
    return {dx, dw, torch::Tensor()};
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
