#include "sora/io/quality.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::sora {
namespace {

void check_pair(const char* what, const torch::Tensor& a, const torch::Tensor& b) {
  COLOSSAL_CHECK(a.sizes() == b.sizes() && a.dim() == 4 && a.size(3) == 3, "[quality] ", what,
                 ": expected two clips [T, H, W, 3] of one shape, got ", a.sizes(), " and ", b.sizes());
}

// [T, H, W, 3] -> [T x 3, 1, H, W] float64: every frame's channel an image of its own.
torch::Tensor planes(const torch::Tensor& frames) {
  return frames.to(torch::kFloat64).permute({0, 3, 1, 2}).reshape({-1, 1, frames.size(1), frames.size(2)});
}

}  // namespace

double psnr(const torch::Tensor& a, const torch::Tensor& b) {
  COLOSSAL_CHECK(a.sizes() == b.sizes(), "[quality] psnr of shapes ", a.sizes(), " and ", b.sizes());
  const double mse = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).pow(2).mean().item<double>();
  return mse == 0 ? INFINITY : 10 * std::log10(255.0 * 255.0 / mse);
}

double ssim(const torch::Tensor& a, const torch::Tensor& b) {
  check_pair("ssim", a, b);
  int64_t size = std::min<int64_t>({11, a.size(1), a.size(2)});
  if (size % 2 == 0) --size;
  const auto x = torch::arange(size, torch::kFloat64) - (size - 1) / 2.0;
  auto g = torch::exp(-x.pow(2) / (2 * 1.5 * 1.5));
  g = g / g.sum();
  const auto window = torch::outer(g, g).view({1, 1, size, size});
  const auto p = planes(a), q = planes(b);
  auto blur = [&](const torch::Tensor& t) { return torch::conv2d(t, window); };
  const auto mu_p = blur(p), mu_q = blur(q);
  const auto var_p = blur(p * p) - mu_p * mu_p, var_q = blur(q * q) - mu_q * mu_q;
  const auto cov = blur(p * q) - mu_p * mu_q;
  const double c1 = std::pow(0.01 * 255, 2), c2 = std::pow(0.03 * 255, 2);
  const auto map = ((2 * mu_p * mu_q + c1) * (2 * cov + c2)) / ((mu_p * mu_p + mu_q * mu_q + c1) * (var_p + var_q + c2));
  return map.mean().item<double>();
}

}  // namespace colossal::sora
