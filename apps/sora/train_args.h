#pragma once
// train_sora's settings: flags, or the same names as keys of a YAML/JSON file (--config); flags
// given on the command line win over the file.
#include <cstdint>
#include <string>

#include "core/booster/plugin_config.h"

namespace colossal::sora_app {

struct TrainArgs {
  std::string stage = "all";  // vae | dit | all (the VAE, then the DiT on its frozen latents)
  // Data: Open-Sora's CSV (default: the built-in real clips), cut into windows
  std::string data;
  int64_t frames = 8, frame_stride = 4, height = 32, width = 32;
  int64_t window_step = 2;          // kept frames between window starts (overlapping windows)
  double held_out_fraction = 0.1;   // windows held out for the evaluation figures
  bool balance_clips = true;        // short clips repeated so each clip is seen about equally
  // The VAE
  int64_t vae_channels = 32, latent_channels = 4, temporal_factor = 2;
  double kl_weight = 1e-6;
  int64_t vae_epochs = 20;
  double vae_lr = 2e-3;
  // The DiT
  int64_t hidden = 128, depth = 4, heads = 4;
  double caption_dropout = 0.1;  // captions replaced by the null caption (classifier-free guidance)
  bool grad_checkpoint = false;
  int64_t dit_epochs = 100;
  double dit_lr = 5e-4;
  // The latent cache: auto (SAVE_DIR/dit/latent_cache.safetensors), none, or a path
  std::string latent_cache = "auto";
  // Both stages
  booster::PluginConfig plugin;
  int64_t batch_size = 8;  // windows per step over all ranks
  int64_t max_steps = 0;   // > 0: each stage stops after this many steps
  double weight_decay = 0.0;
  uint64_t seed = 42;
  std::string save_dir = "out/sora";  // vae/ and dit/: checkpoints/, model/, log.jsonl
  std::string load_checkpoint = "auto";
  int64_t log_interval = 10;
  int64_t keep_checkpoints = 2;
  std::string config;
  void validate() const;
};

bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::sora_app
