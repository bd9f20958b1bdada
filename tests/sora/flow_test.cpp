// Rectified flow: the training pair lies on the straight path, timesteps follow their
// distribution, and the Euler sampler integrates known velocity fields exactly.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sora/diffusion/rectified_flow.h"
#include "tests/support/errors.h"

namespace sora_flow_test {
using namespace colossal::sora;

TEST(RectifiedFlow, TrainingPairsLieOnTheStraightPath) {
  torch::manual_seed(0);
  const auto x0 = torch::randn({64, 3, 2, 4, 4});
  const auto p = flow_training_pair(x0, {});
  const auto t = p.t.view({64, 1, 1, 1, 1});
  // x_t = x0 + t (x1 - x0), with the target the velocity x1 - x0.
  EXPECT_TRUE(torch::allclose(p.noisy, x0 + t * p.target, 1e-5, 1e-5));
  const auto noise = p.target + x0;
  EXPECT_NEAR(noise.std().item<double>(), 1, 0.05);
}

TEST(RectifiedFlow, TimestepsFollowTheirDistribution) {
  torch::manual_seed(1);
  const auto t = sample_timesteps(20000, {});
  EXPECT_GT(t.min().item<double>(), 0);
  EXPECT_LT(t.max().item<double>(), 1);
  EXPECT_NEAR(t.mean().item<double>(), 0.5, 0.01);
  EXPECT_NEAR(torch::logit(t).std().item<double>(), 1, 0.03);  // logit-normal(0, 1)
  const auto shifted = sample_timesteps(20000, {.shift = 3});
  EXPECT_GT(shifted.mean().item<double>(), 0.65);  // toward noise for larger inputs
  EXPECT_NEAR(resolution_shift(4 * 256, 256), 2, 1e-12);
  EXPECT_EQ(resolution_shift(100, 256), 1);
  EXPECT_NEAR(sample_timesteps(20000, {.timesteps = "uniform"}).mean().item<double>(), 0.5, 0.01);
}

TEST(RectifiedFlow, EulerIntegratesKnownFieldsExactly) {
  torch::manual_seed(2);
  const auto x0 = torch::randn({2, 4, 3}, torch::kFloat64), noise = torch::randn({2, 4, 3}, torch::kFloat64);
  // The exact field of a single data point: v(x, t) = (x - x0) / t. Euler lands on x0 exactly,
  // whatever the steps and the shift of the grid.
  const VelocityFn exact = [&](const torch::Tensor& x, const torch::Tensor& t, bool) {
    return (x - x0) / t.view({-1, 1, 1});
  };
  for (int64_t steps : {1, 7, 30})
    for (double shift : {1.0, 3.0})
      EXPECT_TRUE(torch::allclose(sample_flow(noise, exact, {.steps = steps, .shift = shift}), x0, 1e-9, 1e-9))
          << steps << " steps, shift " << shift;
  // Constant fields, and guidance: unconditional b, conditional a -> b + g (a - b).
  const auto a = torch::full({2, 4, 3}, 0.5, torch::kFloat64), b = torch::full({2, 4, 3}, -0.25, torch::kFloat64);
  const VelocityFn constant = [&](const torch::Tensor&, const torch::Tensor&, bool conditional) {
    return conditional ? a : b;
  };
  EXPECT_TRUE(torch::allclose(sample_flow(noise, constant, {.steps = 5}), noise - a));
  EXPECT_TRUE(torch::allclose(sample_flow(noise, constant, {.steps = 5, .cfg_scale = 4}), noise - (b + 4 * (a - b))));
  const auto msg = colossal::testing::error_message_of([&] { sample_flow(noise, constant, {.steps = 0}); });
  EXPECT_NE(msg.find("steps 0"), std::string::npos) << msg;
}

}  // namespace sora_flow_test
