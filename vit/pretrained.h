#pragma once
// Hugging Face ViT directories (config.json + safetensors) in both directions.
#include <string>

#include "core/checkpoint/model_io.h"
#include "vit/model.h"

namespace colossal::vit {

void save_pretrained(const ViTConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir);

struct LoadedViT {
  ViTConfig config;
  ViTForImageClassification model{nullptr};
  checkpoint::LoadReport report;
};
LoadedViT load_pretrained(const std::string& dir, const checkpoint::LoadModelOptions& options = {});

}  // namespace colossal::vit
