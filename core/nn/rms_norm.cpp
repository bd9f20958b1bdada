#include "core/nn/rms_norm.h"

#include <ATen/Parallel.h>
#include <torch/autograd.h>

#include <cmath>
#include <vector>

#include "core/cuda/ops.h"

namespace colossal::nn {
namespace {

constexpr int kLanes = 16;  // independent partial sums: lets the compiler vectorise reductions

float sum_of_squares(const float* x, int64_t d) {
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[i + l] * x[i + l];
  float s = 0;
  for (; i < d; ++i) s += x[i] * x[i];
  for (float a : acc) s += a;
  return s;
}

float dot3(const float* a, const float* b, const float* c, int64_t d) {
  float acc[kLanes] = {0};
  int64_t i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l] * c[i + l];
  float s = 0;
  for (; i < d; ++i) s += a[i] * b[i] * c[i];
  for (float v : acc) s += v;
  return s;
}

struct RmsNormFunction : torch::autograd::Function<RmsNormFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    const int64_t d = x.size(-1), rows = x.numel() / d;
    auto y = torch::empty_like(x);
    auto rstd = torch::empty({rows}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* rp = rstd.data_ptr<float>();
    at::parallel_for(0, rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const float* xr = xp + r * d;
        float* yr = yp + r * d;
        float s = 1.0f / std::sqrt(sum_of_squares(xr, d) / static_cast<float>(d) + static_cast<float>(eps));
        rp[r] = s;
        for (int64_t i = 0; i < d; ++i) yr[i] = wp[i] * (xr[i] * s);
      }
    });
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& weight = saved[1];
    const auto& rstd = saved[2];
    auto gy = grads[0].contiguous();
    const int64_t d = x.size(-1), rows = x.numel() / d;
    auto gx = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* wp = weight.data_ptr<float>();
    const float* rp = rstd.data_ptr<float>();
    const float* gp = gy.data_ptr<float>();
    float* gxp = gx.data_ptr<float>();
    // Weight gradient: per-chunk partial sums, added in chunk order (deterministic for a
    // given thread count's chunking, which depends only on rows).
    const int64_t grain = 16;
    const int64_t chunks = (rows + grain - 1) / grain;
    std::vector<float> partial(static_cast<size_t>(chunks * d), 0.0f);
    at::parallel_for(0, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        float* gw = partial.data() + c * d;
        for (int64_t r = c * grain; r < std::min(rows, (c + 1) * grain); ++r) {
          const float* xr = xp + r * d;
          const float* gr = gp + r * d;
          float* gxr = gxp + r * d;
          const float s = rp[r];
          // gx = s * (gy*w - x * s^2 * sum(gy*w*x) / d)
          const float k = s * s * dot3(gr, wp, xr, d) / static_cast<float>(d);
          for (int64_t i = 0; i < d; ++i) {
            gxr[i] = s * (gr[i] * wp[i] - xr[i] * k);
            gw[i] += gr[i] * (xr[i] * s);
          }
        }
      }
    });
    auto gw = torch::zeros_like(weight);
    float* gwp = gw.data_ptr<float>();
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < d; ++i) gwp[i] += partial[static_cast<size_t>(c * d + i)];
    return {gx, gw, torch::Tensor()};
  }
};

// On the GPU: kernels/cuda/rms_norm (fp32, bf16, fp16), one launch forward, two backward.
struct RmsNormCudaFunction : torch::autograd::Function<RmsNormCudaFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, double eps) {
    auto [y, rstd] = cuda::rms_norm_forward(x, weight, eps);
    ctx->save_for_backward({x, weight, rstd});
    return y;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto [gx, gw] = cuda::rms_norm_backward(grads[0], saved[0], saved[1], saved[2]);
    return {gx, gw, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (x.scalar_type() == torch::kFloat && weight.scalar_type() == torch::kFloat && x.device().is_cpu() &&
      weight.is_contiguous() && weight.dim() == 1 && weight.size(0) == x.size(-1)) {
    return RmsNormFunction::apply(x.contiguous(), weight, eps);
  }
  if (x.is_cuda() && weight.scalar_type() == x.scalar_type() && weight.dim() == 1 && weight.size(0) == x.size(-1) &&
      x.scalar_type() != torch::kDouble) {
    return RmsNormCudaFunction::apply(x.contiguous(), weight, eps);
  }
  auto h = x.to(torch::kFloat32);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * h.to(x.scalar_type());
}

}  // namespace colossal::nn
