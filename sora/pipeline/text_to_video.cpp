#include "sora/pipeline/text_to_video.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <fstream>

#include "core/checkpoint/model_io.h"
#include "core/common/check.h"
#include "sora/diffusion/rectified_flow.h"

namespace colossal::sora {
namespace {

nlohmann::json read_config(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "cannot read '", path, "': train the models first (train_sora --save_dir DIR, then "
                 "generate_video --model_dir DIR)");
  return nlohmann::json::parse(in);
}

}  // namespace

TextToVideo::TextToVideo(const std::string& model_dir)
    : dit_config_(read_config(model_dir + "/dit/model/config.json")),
      vae_config_(read_config(model_dir + "/vae/model/config.json")) {
  vae_ = VideoVae(VideoVaeOptions{.latent_channels = vae_config_["latent_channels"],
                                  .base_channels = vae_config_["vae_channels"], .multipliers = {1, 2},
                                  .temporal_factor = vae_config_["temporal_factor"]});
  checkpoint::load_model_state(*vae_, model_dir + "/vae/model");
  const int64_t hidden = dit_config_["hidden"], heads = dit_config_["heads"], tokens = dit_config_["text_tokens"];
  denoiser_ = VideoDenoiser(StditOptions{.in_channels = dit_config_["latent_channels"], .hidden = hidden,
                                         .depth = dit_config_["depth"], .heads = heads, .text_dim = hidden,
                                         .text_tokens = tokens},
                            TextEncoderOptions{.dim = hidden, .layers = dit_config_["text_layers"], .heads = heads,
                                               .max_tokens = tokens});
  checkpoint::load_model_state(*denoiser_, model_dir + "/dit/model");
  vae_->eval();
  denoiser_->eval();
}

int64_t TextToVideo::frames(const TextToVideoOptions& o) const {
  return o.frames > 0 ? o.frames : dit_config_["frames"].get<int64_t>();
}
int64_t TextToVideo::height(const TextToVideoOptions& o) const {
  return o.height > 0 ? o.height : dit_config_["height"].get<int64_t>();
}
int64_t TextToVideo::width(const TextToVideoOptions& o) const {
  return o.width > 0 ? o.width : dit_config_["width"].get<int64_t>();
}

torch::Tensor TextToVideo::generate(const std::string& prompt, const TextToVideoOptions& o) {
  COLOSSAL_CHECK(o.steps >= 1 && o.cfg_scale >= 0, "--steps ", o.steps, ", --cfg_scale ", o.cfg_scale,
                 ": expected >= 1 and >= 0");
  torch::NoGradGuard no_grad;
  const int64_t h = height(o), w = width(o);
  const auto latent = vae_->latent_shape({1, 3, frames(o), h, w});  // names sizes that do not divide
  COLOSSAL_CHECK(latent[3] % 2 == 0 && latent[4] % 2 == 0, "--resolution ", h, "x", w,
                 ": height and width must divide by 8 (the VAE's 4 and STDiT's 2x2 patches)");
  const auto caption = denoiser_->text->forward({prompt});
  const auto [null_tokens, null_mask] = denoiser_->dit->null_text(1);
  const VelocityFn velocity = [&](const torch::Tensor& x, const torch::Tensor& t, bool conditional) {
    return conditional ? denoiser_->dit->forward(x, t, caption.tokens, caption.mask)
                       : denoiser_->dit->forward(x, t, null_tokens, null_mask);
  };
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  const auto noise = torch::randn(latent, gen);
  const auto z = sample_flow(noise, velocity, {.steps = o.steps, .cfg_scale = o.cfg_scale,
                                               .shift = dit_config_["flow_shift"].get<double>()});
  return video_to_frames(vae_->decode(z / dit_config_["latent_scale"].get<double>()))[0];
}

}  // namespace colossal::sora
