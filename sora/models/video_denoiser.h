#pragma once
// The diffusion model as one module: STDiT and its caption encoder, trained together and saved
// together ("dit.*", "text.*"), so train_sora writes and generate_video reads one model directory.
#include <torch/nn/module.h>

#include "sora/models/stdit.h"
#include "sora/models/text_encoder.h"

namespace colossal::sora {

class VideoDenoiserImpl : public torch::nn::Module {
 public:
  VideoDenoiserImpl(const StditOptions& dit_options, const TextEncoderOptions& text_options) {
    dit = register_module("dit", Stdit(dit_options));
    text = register_module("text", TextEncoder(text_options));
  }
  Stdit dit{nullptr};
  TextEncoder text{nullptr};
};
TORCH_MODULE(VideoDenoiser);

}  // namespace colossal::sora
