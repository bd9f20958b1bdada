#pragma once
// Text to video with the models train_sora writes (its --save_dir: vae/model and dit/model,
// each with config.json): the caption encoded, latent noise carried to data by the Euler sampler
// over STDiT's velocity with classifier-free guidance against the null caption, and decoded by
// the VAE. generate_video and bench_sora both go through it.
#include <torch/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "sora/models/video_denoiser.h"
#include "sora/models/video_vae.h"

namespace colossal::sora {

struct TextToVideoOptions {
  int64_t frames = 0, height = 0, width = 0;  // 0: the training windows' size
  int64_t steps = 30;                         // Euler steps
  double cfg_scale = 4;                       // 1: no guidance
  uint64_t seed = 0;                          // the latent noise
};

class TextToVideo {
 public:
  /// Loads both models; a missing model or config is an error that says to train first.
  explicit TextToVideo(const std::string& model_dir);
  /// Frames [T, H, W, 3] uint8. Sizes that the VAE and the patches do not divide are named.
  torch::Tensor generate(const std::string& prompt, const TextToVideoOptions& options);
  /// The training windows' frames, height, width, frame stride and window step, and the fps.
  const nlohmann::json& config() const { return dit_config_; }
  int64_t frames(const TextToVideoOptions& o) const;
  int64_t height(const TextToVideoOptions& o) const;
  int64_t width(const TextToVideoOptions& o) const;

 private:
  nlohmann::json dit_config_, vae_config_;
  VideoVae vae_{nullptr};
  VideoDenoiser denoiser_{nullptr};
};

}  // namespace colossal::sora
