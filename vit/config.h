#pragma once
// ViT hyper-parameters, named as in a Hugging Face ViTConfig config.json, and the named sizes
// train_vit offers (nano, tiny, small, base = ViT-B/16).
#include <cstdint>
#include <string>
#include <vector>

#include "core/tools/model_analysis.h"

namespace colossal::vit {

struct ViTConfig {
  int64_t image_size = 224, patch_size = 16, num_channels = 3;
  int64_t hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12, intermediate_size = 3072;
  double layer_norm_eps = 1e-12;
  bool qkv_bias = true;
  int64_t num_labels = 1000;
  double initializer_range = 0.02;
  std::vector<std::string> id2label;  // optional class names

  int64_t num_patches() const { return (image_size / patch_size) * (image_size / patch_size); }
  /// Parameters of the whole ViTForImageClassification (what one process holds; a rank of a
  /// tensor-parallel or pipeline layout holds a part).
  int64_t num_parameters() const;
  /// Throws naming the field when values contradict each other.
  void validate() const;
  /// Reads config.json (model_type vit, hidden_act gelu); names the file and field on errors.
  static ViTConfig from_json_file(const std::string& path);
  std::string to_json() const;
  /// "nano" (128 wide, 4 layers, 4 heads, MLP 256: small images on CPUs), "tiny" (192 wide, 12 layers, 3 heads), "small" (384, 12, 6), "base" (ViT-B/16: 768, 12, 12).
  static ViTConfig named(const std::string& name, int64_t image_size, int64_t patch_size, int64_t channels,
                         int64_t num_labels);
};

/// The model's shape for the analysis tools (core/tools/model_analysis.h).
tools::ModelSpec model_spec(const ViTConfig& config);

}  // namespace colossal::vit
