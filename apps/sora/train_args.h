#pragma once
// train_sora's settings, each declared once in visit(): the flags, the keys of a YAML/JSON file
// (--config; flags given on the command line win), --help and the range checks all come from
// that list (apps/common/settings.h).
#include <cstdint>
#include <string>

#include "apps/common/train_loop.h"
#include "core/booster/plugin_config.h"
#include "core/common/options.h"

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
  int64_t batch_size = 8;  // windows per step over all ranks
  double weight_decay = 0.0;
  std::string save_dir = "out/sora";  // vae/ and dit/: checkpoints/, model/, log.jsonl
  apps::TrainLoopOptions loop;        // steps, clipping, checkpoints, logs (apps/common/train_loop.h)
  booster::PluginConfig plugin;
  std::string config;

  template <class V>
  void visit(V& v) {
    v("stage", stage, "vae | dit | all", one_of({"vae", "dit", "all"}));
    v("data", data, "Open-Sora CSV: path,text,num_frames,height,width,fps (default: the built-in clips)");
    v("frames", frames, "frames per training window", between(1, 1024));
    v("frame_stride", frame_stride, "keep every n-th frame of a clip", at_least(1));
    v("height", height, "window height", between(8, 4096));
    v("width", width, "window width", between(8, 4096));
    v("window_step", window_step, "kept frames between window starts (0: no overlap)", at_least(0));
    v("held_out_fraction", held_out_fraction, "windows held out for evaluation", strictly_between(0, 1));
    v("balance_clips", balance_clips, "repeat short clips' windows so every clip is seen about as often",
      alias("!no_balance_clips"));
    v("vae_channels", vae_channels, "VAE base width", at_least(8));
    v("latent_channels", latent_channels, "latent channels", at_least(1));
    v("temporal_factor", temporal_factor, "VAE temporal compression (1, 2 or 4)", between(1, 4));
    v("kl_weight", kl_weight, "VAE KL weight", at_least(0));
    v("vae_epochs", vae_epochs, "VAE epochs", at_least(1));
    v("vae_lr", vae_lr, "VAE learning rate", above(0));
    v("hidden", hidden, "DiT width", at_least(1));
    v("depth", depth, "DiT spatial + temporal block pairs", at_least(1));
    v("heads", heads, "DiT attention heads", at_least(1));
    v("caption_dropout", caption_dropout, "share of captions dropped (classifier-free guidance)", from_up_to(0, 1));
    v("grad_checkpoint", grad_checkpoint, "activation checkpointing in the DiT blocks");
    v("dit_epochs", dit_epochs, "DiT epochs", at_least(1));
    v("dit_lr", dit_lr, "DiT learning rate", above(0));
    v("latent_cache", latent_cache,
      "the VAE-encoded windows on disk, mapped by later runs: auto (SAVE_DIR/dit/latent_cache.safetensors) | none "
      "(in memory only) | a file path");
    v("batch_size", batch_size, "windows per step over all ranks", at_least(1));
    v("weight_decay", weight_decay, "AdamW weight decay", at_least(0));
    v("save_dir", save_dir, "vae/ and dit/ (checkpoints, model, log) go here");
    loop.visit(v);
  }
  void validate() const;
};

bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::sora_app
