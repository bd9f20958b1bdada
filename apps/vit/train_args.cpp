#include "apps/vit/train_args.h"

#include <CLI/CLI.hpp>

#include "apps/common/plugin_flags.h"
#include "core/common/check.h"
#include "core/common/config.h"

namespace colossal::vit_app {

void TrainArgs::validate() const {
  COLOSSAL_CHECK(batch_size >= 1, "--batch_size: expected >= 1, got ", batch_size);
  COLOSSAL_CHECK(epochs >= 1 || max_steps > 0, "--epochs: expected >= 1, got ", epochs);
  COLOSSAL_CHECK(max_steps >= 0, "--max_steps: expected >= 0, got ", max_steps);
  COLOSSAL_CHECK(lr > 0, "--lr: expected > 0, got ", lr);
  COLOSSAL_CHECK(weight_decay >= 0, "--weight_decay: expected >= 0, got ", weight_decay);
  COLOSSAL_CHECK(warmup_ratio >= 0 && warmup_ratio < 1, "--warmup_ratio: expected in [0, 1), got ", warmup_ratio);
  COLOSSAL_CHECK(label_smoothing >= 0 && label_smoothing < 1, "--label_smoothing: expected in [0, 1), got ",
                 label_smoothing);
  COLOSSAL_CHECK(grad_clip >= 0, "--grad_clip: expected >= 0 (0: off), got ", grad_clip);
  COLOSSAL_CHECK(workers >= 0, "--workers: expected >= 0, got ", workers);
  COLOSSAL_CHECK(on_bad_image == "stop" || on_bad_image == "skip", "--on_bad_image: expected stop or skip, got '",
                 on_bad_image, "'");
  COLOSSAL_CHECK(image_size >= 0 && patch_size >= 0, "--image_size and --patch_size: expected >= 0 (0: automatic)");
  COLOSSAL_CHECK(min_crop_scale >= 0 && min_crop_scale <= 1, "--min_crop_scale: expected in [0, 1], got ",
                 min_crop_scale);
  COLOSSAL_CHECK(init == "mimetic" || init == "normal", "--init: expected mimetic or normal, got '", init, "'");
  COLOSSAL_CHECK(position_init == "sincos" || position_init == "normal",
                 "--position_init: expected sincos or normal, got '", position_init, "'");
  COLOSSAL_CHECK(patch_keep > 0 && patch_keep <= 1, "--patch_keep: expected a share in (0, 1], got ", patch_keep);
  COLOSSAL_CHECK(randaugment >= 0, "--randaugment: expected >= 0, got ", randaugment);
  COLOSSAL_CHECK(randaugment_magnitude >= 0 && randaugment_magnitude <= 10,
                 "--randaugment_magnitude: expected in [0, 10], got ", randaugment_magnitude);
  COLOSSAL_CHECK(held_out_fraction > 0 && held_out_fraction < 1, "--held_out_fraction: expected in (0, 1), got ",
                 held_out_fraction);
  COLOSSAL_CHECK(log_interval >= 1, "--log_interval: expected >= 1, got ", log_interval);
  COLOSSAL_CHECK(keep_checkpoints >= 0, "--keep_checkpoints: expected >= 0 (0: keep all), got ", keep_checkpoints);
  auto_layout.validate();
  COLOSSAL_CHECK(top_k >= 1, "--top_k: expected >= 1, got ", top_k);
}

namespace {

void read_config_file(const std::string& path, TrainArgs& a) {
  auto c = ConfigNode::load_file(path);
  c.read("data", a.data);
  c.read("dataset", a.dataset);
  c.read("held_out_fraction", a.held_out_fraction);
  c.read("workers", a.workers);
  c.read("on_bad_image", a.on_bad_image);
  c.read("model", a.model);
  c.read("pretrained", a.pretrained);
  c.read("image_size", a.image_size);
  c.read("patch_size", a.patch_size);
  c.read("grad_checkpoint", a.grad_checkpoint);
  c.read("init", a.init);
  c.read("position_init", a.position_init);
  c.read("patch_keep", a.patch_keep);
  c.read("min_crop_scale", a.min_crop_scale);
  c.read("no_flip", a.no_flip);
  c.read("eval_flip", a.eval_flip);
  c.read("randaugment", a.randaugment);
  c.read("randaugment_magnitude", a.randaugment_magnitude);
  c.read("batch_size", a.batch_size);
  c.read("epochs", a.epochs);
  c.read("max_steps", a.max_steps);
  c.read("lr", a.lr);
  c.read("weight_decay", a.weight_decay);
  c.read("warmup_ratio", a.warmup_ratio);
  c.read("label_smoothing", a.label_smoothing);
  c.read("grad_clip", a.grad_clip);
  c.read("seed", a.seed);
  a.auto_layout.read(c);
  c.read("save_dir", a.save_dir);
  c.read("load_checkpoint", a.load_checkpoint);
  c.read("log_interval", a.log_interval);
  c.read("log_file", a.log_file);
  c.read("memory_trace", a.memory_trace);
  c.read("keep_checkpoints", a.keep_checkpoints);
  // Every other key is the plugin's (layout, precision, device, plugin options): make_plugin
  // rejects one that no plugin setting has, naming it and the file.
  a.plugin.read(c);
  c.check_all_keys_used();
}

}  // namespace

bool parse_train_args(int argc, char** argv, TrainArgs& a, int& exit_code) {
  a.config = apps::config_argument(argc, argv);  // the file first: flags override it
  if (!a.config.empty()) read_config_file(a.config, a);

  CLI::App app{"Train a vision transformer (default: the nano ViT on Fashion-MNIST), or classify images with one"};
  app.add_option("--config", a.config, "YAML or JSON file with any of these settings (flags override it)");
  app.add_option("--data", a.data, "directory: DIR/<class>/ images, DIR/train + DIR/val, IDX or CIFAR files");
  app.add_option("--dataset", a.dataset, "built-in dataset when --data is not given")->capture_default_str();
  app.add_option("--held_out_fraction", a.held_out_fraction, "evaluation share of each class (DIR/<class>/ layout)")
      ->capture_default_str();
  app.add_option("--workers", a.workers, "image-decoding threads per rank")->capture_default_str();
  app.add_option("--on_bad_image", a.on_bad_image, "stop | skip an image that cannot be decoded")
      ->capture_default_str();
  app.add_option("--model", a.model, "nano | tiny | small | base | config.json")->capture_default_str();
  app.add_option("--pretrained", a.pretrained, "Hugging Face ViT directory to fine-tune");
  app.add_option("--image_size", a.image_size, "input size (0: the pretrained model's, else the data's, <= 224)")
      ->capture_default_str();
  app.add_option("--patch_size", a.patch_size, "patch size (0: automatic)")->capture_default_str();
  app.add_flag("--grad_checkpoint", a.grad_checkpoint, "recompute each encoder layer in backward");
  app.add_option("--init", a.init, "attention initialisation from scratch: mimetic | normal")->capture_default_str();
  app.add_option("--position_init", a.position_init, "position embeddings from scratch: sincos | normal")
      ->capture_default_str();
  app.add_option("--patch_keep", a.patch_keep, "patch dropout: share of patches each training image keeps (1: off)")
      ->capture_default_str();
  app.add_option("--min_crop_scale", a.min_crop_scale,
                 "random resized crop's smallest area share (0: 0.08, or no crop for images under 64 px)")
      ->capture_default_str();
  app.add_flag("--no_flip", a.no_flip, "no random horizontal flips");
  app.add_flag("--eval_flip", a.eval_flip,
               "test-time augmentation: evaluation also reports accuracy with each image's class "
               "probabilities averaged with its mirror image's, and --predict uses that average");
  app.add_option("--randaugment", a.randaugment, "RandAugment colour operations per image (0: off)")
      ->capture_default_str();
  app.add_option("--randaugment_magnitude", a.randaugment_magnitude, "their strength, 0..10")->capture_default_str();
  apps::PluginFlags plugin_flags;
  plugin_flags.add_to(app, a.plugin.name);
  app.add_option("--batch_size", a.batch_size, "images per rank per step")->capture_default_str();
  app.add_option("--epochs", a.epochs, "passes over the training images")->capture_default_str();
  app.add_option("--max_steps", a.max_steps, "stop after this many steps (0: --epochs decides)")->capture_default_str();
  app.add_option("--lr", a.lr, "peak learning rate")->capture_default_str();
  app.add_option("--weight_decay", a.weight_decay, "AdamW weight decay (not on biases and norms)")
      ->capture_default_str();
  app.add_option("--warmup_ratio", a.warmup_ratio, "share of the steps spent warming up")->capture_default_str();
  app.add_option("--label_smoothing", a.label_smoothing, "cross-entropy label smoothing")->capture_default_str();
  app.add_option("--grad_clip", a.grad_clip, "global gradient-norm clip (0: off)")->capture_default_str();
  app.add_option("--seed", a.seed, "random seed (weights, order, augmentation)")->capture_default_str();
  app.add_option("--save_dir", a.save_dir, "checkpoints/, model/ and the confusion matrix go here")
      ->capture_default_str();
  app.add_option("--load_checkpoint", a.load_checkpoint,
                 "checkpoint to resume (root or step directory); auto: the newest in the save directory, if any "
                 "(a restarted job continues); none: start over")
      ->capture_default_str();
  app.add_option("--log_interval", a.log_interval, "steps between progress updates")->capture_default_str();
  app.add_option("--log_file", a.log_file, "append metrics as JSON lines");
  a.auto_layout.add_to(app, "SAVE_DIR/auto_layout.json");
  app.add_option("--memory_trace", a.memory_trace,
                 "trace the second step's memory (phases, modules: peak and kept bytes) into this JSON file");
  app.add_option("--keep_checkpoints", a.keep_checkpoints, "checkpoints kept (0: all)")->capture_default_str();
  app.add_option("--predict", a.predict, "classify these image files with a saved model instead of training");
  app.add_option("--model_dir", a.model_dir, "--predict's model (default: --pretrained, else SAVE_DIR/model)");
  app.add_option("--top_k", a.top_k, "--predict: classes printed per image")->capture_default_str();
  if (!apps::parse_job_flags(app, argc, argv, plugin_flags, a.plugin, exit_code)) return false;
  a.validate();
  return true;
}

}  // namespace colossal::vit_app
