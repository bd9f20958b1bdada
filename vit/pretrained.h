#pragma once
// Hugging Face ViT directories (config.json + safetensors) in both directions.
#include <string>
#include <vector>

#include "core/checkpoint/model_io.h"
#include "vit/model.h"

namespace colossal::vit {

/// How images are prepared for the model: Hugging Face's preprocessor_config.json
/// (ViTImageProcessor: resize to size, rescale by 1/255, normalise by image_mean/image_std).
struct ImageProcessorConfig {
  int64_t size = 224;
  std::vector<double> image_mean = {0.5, 0.5, 0.5}, image_std = {0.5, 0.5, 0.5};
  std::string to_json() const;
  /// Missing file: the defaults at the model's image size (what google/vit-* checkpoints use).
  static ImageProcessorConfig from_json_file(const std::string& path, const ViTConfig& model);
};

void save_pretrained(const ViTConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir,
                     const ImageProcessorConfig& processor);
void save_pretrained(const ViTConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir);

struct LoadedViT {
  ViTConfig config;
  ImageProcessorConfig processor;
  ViTForImageClassification model{nullptr};
  checkpoint::LoadReport report;
};
/// `parallel`: the groups to build the model with (each rank then loads only its slices).
LoadedViT load_pretrained(const std::string& dir, const checkpoint::LoadModelOptions& options = {},
                          const parallel::ParallelContext& parallel = {});

}  // namespace colossal::vit
