#pragma once
// train_vit's settings, each declared once in visit(): the flags, the keys of a YAML/JSON file
// (--config; flags given on the command line win), --help and the range checks all come from
// that list (apps/common/settings.h).
#include <cstdint>
#include <string>
#include <vector>

#include "apps/common/auto_layout.h"
#include "apps/common/train_loop.h"
#include "core/booster/plugin_config.h"
#include "core/common/options.h"

namespace colossal::vit_app {

struct TrainArgs {
  // Data
  std::string data;                      // a directory (image folders, IDX or CIFAR files)
  std::string dataset = "fashion-mnist";  // a built-in dataset, when --data is not given
  double held_out_fraction = 0.1;        // DIR/<class>/ layouts: evaluation share per class
  int workers = 2;                       // decoding threads per rank
  std::string on_bad_image = "stop";     // stop | skip
  // Model
  std::string model = "nano";  // nano | tiny | small | base | path/to/config.json
  std::string pretrained;      // Hugging Face ViT directory to start from
  int64_t image_size = 0;      // 0: the pretrained model's, else the data's (at most 224)
  int64_t patch_size = 0;      // 0: the pretrained model's, 16 for >= 128 px, else image_size / 7
  bool grad_checkpoint = false;
  std::string init = "mimetic";  // mimetic | normal (training from scratch)
  // sincos: Fashion-MNIST in 15 epochs 90.04% (2 ranks) against about 89.8% learned from normal;
  // it starts slowly on tiny sets (vit/README.md), where normal is the better choice.
  std::string position_init = "sincos";  // sincos | normal (training from scratch)
  double patch_keep = 1.0;               // patch dropout: share of patch tokens kept in training
  // Augmentation
  double min_crop_scale = 0;  // random resized crop's smallest area share; 0: 0.08, or no crop below 64 px
  bool no_flip = false;
  bool eval_flip = false;  // also evaluate (and --predict) averaging each image with its mirror
  int randaugment = 0;  // colour operations per image
  double randaugment_magnitude = 9;
  // Optimisation
  int64_t batch_size = 32;  // images per rank per step
  int64_t epochs = 15;
  // lr 5e-4: Fashion-MNIST, nano, global batch 64, 3 epochs: 87.07% against 86.39% at 1e-3,
  // 85.31% at 2e-3 and 86.58% at 3e-4.
  double lr = 5e-4, weight_decay = 0.05, warmup_ratio = 0.05, label_smoothing = 0.1;
  // Output
  std::string save_dir = "out/vit";  // checkpoints/, model/, confusion_matrix.{csv,png}
  // Prediction instead of training
  std::vector<std::string> predict;
  std::string model_dir;  // --predict's model (default SAVE_DIR/model)
  int64_t top_k = 5;
  // The loop's settings (steps, clipping, checkpoints, logs; apps/common/train_loop.h)
  apps::TrainLoopOptions loop{.log_interval = 20};
  apps::AutoLayoutFlags auto_layout;  // --plugin auto's trials, budget and report
  // The plugin, layout, precision, device and plugin options (--plugin help lists them all)
  booster::PluginConfig plugin;
  std::string config;

  template <class V>
  void visit(V& v) {
    v("data", data, "directory: DIR/<class>/ images, DIR/train + DIR/val, IDX or CIFAR files");
    v("dataset", dataset, "built-in dataset when --data is not given");
    v("held_out_fraction", held_out_fraction, "evaluation share of each class (DIR/<class>/ layout)",
      strictly_between(0, 1));
    v("workers", workers, "image-decoding threads per rank", between(0, 256));
    v("on_bad_image", on_bad_image, "stop | skip an image that cannot be decoded", one_of({"stop", "skip"}));
    v("model", model, "nano | tiny | small | base | config.json");
    v("pretrained", pretrained, "Hugging Face ViT directory to fine-tune");
    v("image_size", image_size, "input size (0: the pretrained model's, else the data's, <= 224)", between(0, 4096));
    v("patch_size", patch_size, "patch size (0: automatic)", between(0, 4096));
    v("grad_checkpoint", grad_checkpoint, "recompute each encoder layer in backward");
    v("init", init, "attention initialisation from scratch: mimetic | normal", one_of({"mimetic", "normal"}));
    v("position_init", position_init, "position embeddings from scratch: sincos | normal", one_of({"sincos", "normal"}));
    v("patch_keep", patch_keep, "patch dropout: share of patches each training image keeps (1: off)", {.min = 0, .max = 1, .min_open = true});
    v("min_crop_scale", min_crop_scale,
      "random resized crop's smallest area share (0: 0.08, or no crop for images under 64 px)", between(0, 1));
    v("no_flip", no_flip, "no random horizontal flips");
    v("eval_flip", eval_flip,
      "test-time augmentation: evaluation also reports accuracy with each image's class probabilities averaged with "
      "its mirror image's, and --predict uses that average");
    v("randaugment", randaugment, "RandAugment colour operations per image (0: off)", between(0, 16));
    v("randaugment_magnitude", randaugment_magnitude, "their strength", between(0, 10));
    v("batch_size", batch_size, "images per rank per step", at_least(1));
    v("epochs", epochs, "passes over the training images (when --max_steps is 0)", at_least(1));
    v("lr", lr, "peak learning rate", above(0));
    v("weight_decay", weight_decay, "AdamW weight decay (not on biases and norms)", at_least(0));
    v("warmup_ratio", warmup_ratio, "share of the steps spent warming up", from_up_to(0, 1));
    v("label_smoothing", label_smoothing, "cross-entropy label smoothing", from_up_to(0, 1));
    v("save_dir", save_dir, "checkpoints/, model/ and the confusion matrix go here");
    v("predict", predict, "classify these image files with a saved model instead of training");
    v("model_dir", model_dir, "--predict's model (default: --pretrained, else SAVE_DIR/model)");
    v("top_k", top_k, "--predict: classes printed per image", at_least(1));
    loop.visit(v);
    auto_layout.visit(v);
  }
  void validate() const {}
};

bool parse_train_args(int argc, char** argv, TrainArgs& args, int& exit_code);

}  // namespace colossal::vit_app
