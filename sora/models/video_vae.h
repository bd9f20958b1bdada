#pragma once
// The video VAE: an autoencoder that compresses clips [B, 3, T, H, W] (values in [-1, 1]) into
// latents [B, C, T / ft, H / fs, W / fs] for the diffusion transformer, and back.
//
// Convolutions are factorised, as in Open-Sora's and Latte's video VAEs: a 2D spatial
// convolution (kernel 1x3x3) then a 1D temporal one (3x1x1) that is causal — padded on the past
// side only — so a latent frame depends only on its own and earlier input frames (and a clip's
// first frame is encoded as an image would be). Each level halves height and width; the first
// log2(temporal factor) levels halve time too (stride-2 causal convolution); group norms work on
// each frame alone, so nothing mixes a frame with later ones. The decoder mirrors
// it with nearest-neighbour upsampling. The latent is a diagonal Gaussian (mean, log-variance)
// kept near the prior by a small KL weight.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <vector>

namespace colossal::sora {

struct VideoVaeOptions {
  int64_t in_channels = 3;
  int64_t latent_channels = 4;
  int64_t base_channels = 32;
  std::vector<int64_t> multipliers = {1, 2};  // one level each: spatial factor 2^levels
  int64_t temporal_factor = 2;                // 1, 2, 4 ... up to 2^levels
  double kl_weight = 1e-6;
  void validate() const;
  int64_t spatial_factor() const { return int64_t{1} << multipliers.size(); }
};

struct VaeEncoding {
  torch::Tensor mean, logvar;  // [B, C, T', H', W']
  torch::Tensor sample(bool random = true) const;  // mean + std * noise (or the mean)
  torch::Tensor sample_with(const torch::Tensor& noise) const { return mean + torch::exp(0.5 * logvar) * noise; }
  torch::Tensor kl() const;                        // mean over elements of KL(q || N(0, 1))
};

struct VaeLoss {
  torch::Tensor total, reconstruction, kl;
  torch::Tensor recon;  // the decoded clip
};

class VideoVaeImpl : public torch::nn::Module {
 public:
  explicit VideoVaeImpl(VideoVaeOptions options = {});
  VaeEncoding encode(const torch::Tensor& video);
  torch::Tensor decode(const torch::Tensor& latent);
  /// Reconstruction (mean absolute error, as Open-Sora's VAE stage) plus kl_weight x KL. In
  /// training the latent is sampled with `noise` (drawn here when not given: a caller that keys
  /// noise to samples passes its own, so any split of a batch over ranks draws the same).
  VaeLoss loss(const torch::Tensor& video, const torch::Tensor& noise = {});
  /// The latent shape of a clip of shape [B, 3, T, H, W]; throws naming what does not divide.
  std::vector<int64_t> latent_shape(torch::IntArrayRef video_shape) const;
  const VideoVaeOptions& options() const { return options_; }

 private:
  VideoVaeOptions options_;
  torch::nn::ModuleList encoder_, decoder_;
  torch::nn::Conv3d enc_in_{nullptr}, enc_out_{nullptr}, dec_in_{nullptr}, dec_out_{nullptr};
  torch::nn::GroupNorm enc_norm_{nullptr}, dec_norm_{nullptr};
};
TORCH_MODULE(VideoVae);

/// uint8 frames [B, T, H, W, 3] (or [T, H, W, 3]) -> float [B, 3, T, H, W] in [-1, 1], and back.
torch::Tensor frames_to_video(const torch::Tensor& frames);
torch::Tensor video_to_frames(const torch::Tensor& video);

}  // namespace colossal::sora
