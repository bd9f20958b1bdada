#include "apps/sora/train_args.h"

#include <CLI/CLI.hpp>

#include "apps/common/plugin_flags.h"
#include "core/common/check.h"
#include "core/common/config.h"

namespace colossal::sora_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(stage == "vae" || stage == "dit" || stage == "all", "--stage: expected vae, dit or all, got '", stage,
                 "'");
  COLOSSAL_CHECK(frames >= 1 && frame_stride >= 1 && height >= 8 && width >= 8 && window_step >= 0,
                 "--frames, --frame_stride, --height, --width, --window_step: expected >= 1, >= 1, >= 8, >= 8, >= 0");
  COLOSSAL_CHECK(held_out_fraction > 0 && held_out_fraction < 1, "--held_out_fraction: expected in (0, 1), got ",
                 held_out_fraction);
  COLOSSAL_CHECK(vae_channels >= 8 && latent_channels >= 1, "--vae_channels, --latent_channels: expected >= 8, >= 1");
  COLOSSAL_CHECK(caption_dropout >= 0 && caption_dropout < 1, "--caption_dropout: expected in [0, 1), got ",
                 caption_dropout);
  COLOSSAL_CHECK(vae_epochs >= 1 && dit_epochs >= 1, "--vae_epochs, --dit_epochs: expected >= 1");
  COLOSSAL_CHECK(vae_lr > 0 && dit_lr > 0 && weight_decay >= 0, "--vae_lr, --dit_lr: expected > 0; --weight_decay >= 0");
  COLOSSAL_CHECK(batch_size >= 1 && max_steps >= 0 && log_interval >= 1 && keep_checkpoints >= 0,
                 "--batch_size, --log_interval: expected >= 1; --max_steps, --keep_checkpoints: expected >= 0");
}

namespace {

void read_config_file(const std::string& path, TrainArgs& a) {
  auto c = ConfigNode::load_file(path);
  c.read("stage", a.stage);
  c.read("data", a.data);
  c.read("frames", a.frames);
  c.read("frame_stride", a.frame_stride);
  c.read("height", a.height);
  c.read("width", a.width);
  c.read("window_step", a.window_step);
  c.read("held_out_fraction", a.held_out_fraction);
  c.read("balance_clips", a.balance_clips);
  c.read("vae_channels", a.vae_channels);
  c.read("latent_channels", a.latent_channels);
  c.read("temporal_factor", a.temporal_factor);
  c.read("kl_weight", a.kl_weight);
  c.read("vae_epochs", a.vae_epochs);
  c.read("vae_lr", a.vae_lr);
  c.read("hidden", a.hidden);
  c.read("depth", a.depth);
  c.read("heads", a.heads);
  c.read("caption_dropout", a.caption_dropout);
  c.read("grad_checkpoint", a.grad_checkpoint);
  c.read("dit_epochs", a.dit_epochs);
  c.read("dit_lr", a.dit_lr);
  c.read("latent_cache", a.latent_cache);
  c.read("batch_size", a.batch_size);
  c.read("max_steps", a.max_steps);
  c.read("weight_decay", a.weight_decay);
  c.read("seed", a.seed);
  c.read("save_dir", a.save_dir);
  c.read("load_checkpoint", a.load_checkpoint);
  c.read("log_interval", a.log_interval);
  c.read("keep_checkpoints", a.keep_checkpoints);
  a.plugin.read(c);
}

}  // namespace

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  CLI::App app{"train_sora: a video VAE and a spatial-temporal DiT (rectified flow) on real clips"};
  a.config = apps::config_argument(argc, argv);
  if (!a.config.empty()) read_config_file(a.config, a);
  app.add_option("--config", a.config, "YAML or JSON file with any of these settings (flags override it)");
  app.add_option("--stage", a.stage, "vae | dit | all")->capture_default_str();
  app.add_option("--data", a.data, "Open-Sora CSV: path,text,num_frames,height,width,fps (default: the built-in clips)");
  app.add_option("--frames", a.frames, "frames per training window")->capture_default_str();
  app.add_option("--frame_stride", a.frame_stride, "keep every n-th frame of a clip")->capture_default_str();
  app.add_option("--height", a.height, "window height")->capture_default_str();
  app.add_option("--width", a.width, "window width")->capture_default_str();
  app.add_option("--window_step", a.window_step, "kept frames between window starts (0: no overlap)")
      ->capture_default_str();
  app.add_option("--held_out_fraction", a.held_out_fraction, "windows held out for evaluation")->capture_default_str();
  app.add_flag("--balance_clips,!--no_balance_clips", a.balance_clips,
               "repeat short clips' windows so every clip is seen about as often (default on)");
  app.add_option("--vae_channels", a.vae_channels, "VAE base width")->capture_default_str();
  app.add_option("--latent_channels", a.latent_channels, "latent channels")->capture_default_str();
  app.add_option("--temporal_factor", a.temporal_factor, "VAE temporal compression (1, 2 or 4)")->capture_default_str();
  app.add_option("--kl_weight", a.kl_weight, "VAE KL weight")->capture_default_str();
  app.add_option("--vae_epochs", a.vae_epochs, "VAE epochs")->capture_default_str();
  app.add_option("--vae_lr", a.vae_lr, "VAE learning rate")->capture_default_str();
  app.add_option("--hidden", a.hidden, "DiT width")->capture_default_str();
  app.add_option("--depth", a.depth, "DiT spatial + temporal block pairs")->capture_default_str();
  app.add_option("--heads", a.heads, "DiT attention heads")->capture_default_str();
  app.add_option("--caption_dropout", a.caption_dropout, "share of captions dropped (classifier-free guidance)")
      ->capture_default_str();
  app.add_flag("--grad_checkpoint", a.grad_checkpoint, "activation checkpointing in the DiT blocks");
  app.add_option("--dit_epochs", a.dit_epochs, "DiT epochs")->capture_default_str();
  app.add_option("--dit_lr", a.dit_lr, "DiT learning rate")->capture_default_str();
  app.add_option("--latent_cache", a.latent_cache,
                 "the VAE-encoded windows on disk, mapped by later runs: auto (SAVE_DIR/dit/latent_cache.safetensors) "
                 "| none (in memory only) | a file path")->capture_default_str();
  apps::PluginFlags plugin_flags;
  plugin_flags.add_to(app, a.plugin.name);
  app.add_option("--batch_size", a.batch_size, "windows per step over all ranks")->capture_default_str();
  app.add_option("--max_steps", a.max_steps, "each stage stops after this many steps (0: its epochs decide)")
      ->capture_default_str();
  app.add_option("--weight_decay", a.weight_decay, "AdamW weight decay")->capture_default_str();
  app.add_option("--seed", a.seed, "random seed")->capture_default_str();
  app.add_option("--save_dir", a.save_dir, "vae/ and dit/ (checkpoints, model, log) go here")->capture_default_str();
  app.add_option("--load_checkpoint", a.load_checkpoint, "auto | none | a checkpoint directory (of the stage)")
      ->capture_default_str();
  app.add_option("--log_interval", a.log_interval, "steps between progress updates")->capture_default_str();
  app.add_option("--keep_checkpoints", a.keep_checkpoints, "checkpoints kept per stage (0: all)")->capture_default_str();
  if (!apps::parse_job_flags(app, argc, argv, plugin_flags, a.plugin, exit_code)) return false;
  a.validate();
  return true;
}

}  // namespace colossal::sora_app
