#pragma once
// How close two clips are, the two figures video papers report: PSNR and SSIM. Both take frames
// [T, H, W, 3] as uint8 (or floats on the same 0..255 scale) of one shape.
#include <torch/types.h>

namespace colossal::sora {

/// Peak signal-to-noise ratio in dB over every pixel (infinite for identical clips).
double psnr(const torch::Tensor& a, const torch::Tensor& b);

/// Structural similarity (Wang et al. 2004): local means, variances and covariance under an
/// 11x11 Gaussian window (sigma 1.5), C1 = (0.01 L)^2 and C2 = (0.03 L)^2 with L = 255, averaged
/// over the valid positions of every frame and colour channel. 1 for identical clips. Frames
/// smaller than the window use a window of their smaller side (odd).
double ssim(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace colossal::sora
