#pragma once
// Rectified flow (Liu et al. 2022; Open-Sora 1.2+): data x0 and noise x1 are joined by the
// straight path x_t = (1 - t) x0 + t x1, t in [0, 1], whose velocity dx/dt = x1 - x0 the model
// learns to predict. Sampling integrates the learned velocity from pure noise (t = 1) back to
// data (t = 0) with Euler steps; classifier-free guidance mixes the conditional and
// unconditional velocities.
//
// Training timesteps are drawn logit-normal (t = sigmoid(n), n ~ N(mean, std): the middle of the
// path, where the velocity is hardest, is seen most) and optionally shifted toward noise for
// larger inputs (t' = s t / (1 + (s - 1) t), s growing with the number of latent tokens), as
// Open-Sora 1.2 does for higher resolutions and longer clips.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>

namespace colossal::sora {

struct FlowOptions {
  std::string timesteps = "logit_normal";  // logit_normal | uniform
  double logit_mean = 0, logit_std = 1;
  double shift = 1;  // 1: none
  void validate() const;
};

/// Open-Sora's resolution shift: sqrt(tokens / base_tokens), at least 1.
double resolution_shift(int64_t tokens, int64_t base_tokens);

/// Timesteps [B] in (0, 1).
torch::Tensor sample_timesteps(int64_t batch, const FlowOptions& options);

struct FlowSample {
  torch::Tensor noisy, target, t;  // x_t, the velocity x1 - x0, and t [B]
};

/// The training pair for data `x0` [B, ...]: noise drawn here, timesteps from `options`.
FlowSample flow_training_pair(const torch::Tensor& x0, const FlowOptions& options);
/// The same with the noise and timesteps [B] given (a caller that keys them to samples).
FlowSample flow_training_pair(const torch::Tensor& x0, const torch::Tensor& noise, const torch::Tensor& t);
/// Maps uniform or standard-normal draws [B] to timesteps as sample_timesteps does (logit-normal
/// takes the normal draw, uniform the uniform one).
torch::Tensor timesteps_from(const torch::Tensor& normal, const torch::Tensor& uniform, const FlowOptions& options);

/// The velocity model: (x_t, t [B], conditional?) -> velocity.
using VelocityFn = std::function<torch::Tensor(const torch::Tensor& x, const torch::Tensor& t, bool conditional)>;

struct SamplerOptions {
  int64_t steps = 30;
  double cfg_scale = 1;  // 1: the conditional velocity alone (no unconditional pass)
  double shift = 1;      // the same timestep shift as training
  void validate() const;
};

/// Integrates from `noise` (t = 1) to t = 0 with Euler steps on the (shifted) time grid.
torch::Tensor sample_flow(const torch::Tensor& noise, const VelocityFn& velocity, const SamplerOptions& options);

}  // namespace colossal::sora
