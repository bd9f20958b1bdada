#include "sora/diffusion/rectified_flow.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::sora {
namespace {

torch::Tensor shifted(const torch::Tensor& t, double s) { return s == 1 ? t : s * t / (1 + (s - 1) * t); }

}  // namespace

void FlowOptions::validate() const {
  COLOSSAL_CHECK(timesteps == "logit_normal" || timesteps == "uniform", "[rectified flow] timesteps '", timesteps,
                 "': expected logit_normal or uniform");
  COLOSSAL_CHECK(logit_std > 0 && shift >= 1, "[rectified flow] logit_std ", logit_std, ", shift ", shift,
                 ": expected > 0 and >= 1");
}

void SamplerOptions::validate() const {
  COLOSSAL_CHECK(steps >= 1 && cfg_scale >= 0 && shift >= 1, "[rectified flow] steps ", steps, ", cfg_scale ",
                 cfg_scale, ", shift ", shift, ": expected >= 1, >= 0, >= 1");
}

double resolution_shift(int64_t tokens, int64_t base_tokens) {
  COLOSSAL_CHECK(tokens >= 1 && base_tokens >= 1, "[rectified flow] tokens ", tokens, ", base ", base_tokens);
  return std::max(1.0, std::sqrt(static_cast<double>(tokens) / static_cast<double>(base_tokens)));
}

torch::Tensor timesteps_from(const torch::Tensor& normal, const torch::Tensor& uniform, const FlowOptions& o) {
  o.validate();
  auto t = o.timesteps == "uniform" ? uniform : torch::sigmoid(normal * o.logit_std + o.logit_mean);
  return shifted(t, o.shift).clamp(1e-5, 1 - 1e-5);
}

torch::Tensor sample_timesteps(int64_t batch, const FlowOptions& o) {
  return timesteps_from(torch::randn({batch}), torch::rand({batch}), o);
}

FlowSample flow_training_pair(const torch::Tensor& x0, const FlowOptions& o) {
  return flow_training_pair(x0, torch::randn_like(x0), sample_timesteps(x0.size(0), o));
}

FlowSample flow_training_pair(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& t_in) {
  const auto t = t_in.to(x0.dtype());
  std::vector<int64_t> shape(x0.dim(), 1);
  shape[0] = x0.size(0);
  const auto tt = t.view(shape);
  return {(1 - tt) * x0 + tt * noise, noise - x0, t};
}

torch::Tensor sample_flow(const torch::Tensor& noise, const VelocityFn& velocity, const SamplerOptions& o) {
  o.validate();
  torch::NoGradGuard no_grad;
  const auto grid = shifted(torch::linspace(1, 0, o.steps + 1, torch::kFloat64), o.shift);
  auto x = noise.clone();
  for (int64_t i = 0; i < o.steps; ++i) {
    const double t = grid[i].item<double>(), next = grid[i + 1].item<double>();
    const auto tb = torch::full({x.size(0)}, t, x.options());
    auto v = velocity(x, tb, true);
    if (o.cfg_scale != 1) {
      const auto unconditional = velocity(x, tb, false);
      v = unconditional + o.cfg_scale * (v - unconditional);
    }
    x = x + (next - t) * v;  // dt < 0: toward the data
  }
  return x;
}

}  // namespace colossal::sora
