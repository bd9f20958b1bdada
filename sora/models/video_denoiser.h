#pragma once
// The diffusion model as one module: STDiT and its caption encoder, trained together and saved
// together ("dit.*", "text.*"), so train_sora writes and generate_video reads one model directory.
#include <torch/nn/module.h>

#include "sora/models/stdit.h"
#include "sora/models/text_encoder.h"

namespace colossal::sora {

class VideoDenoiserImpl : public torch::nn::Module {
 public:
  /// `parallel`: STDiT's groups (sequence parallelism); the caption encoder is replicated.
  VideoDenoiserImpl(const StditOptions& dit_options, const TextEncoderOptions& text_options,
                    parallel::ParallelContext parallel = {}) {
    dit = register_module("dit", Stdit(dit_options, std::move(parallel)));
    text = register_module("text", TextEncoder(text_options));
  }
  Stdit dit{nullptr};
  TextEncoder text{nullptr};
};
TORCH_MODULE(VideoDenoiser);

}  // namespace colossal::sora
