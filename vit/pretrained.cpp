#include "vit/pretrained.h"

#include "core/checkpoint/atomic_file.h"

namespace colossal::vit {

void save_pretrained(const ViTConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir) {
  checkpoint::save_model_state(weights, dir);
  checkpoint::write_text_atomically(dir + "/config.json", config.to_json());
}

LoadedViT load_pretrained(const std::string& dir, const checkpoint::LoadModelOptions& options) {
  LoadedViT out;
  out.config = ViTConfig::from_json_file(dir + "/config.json");
  out.model = ViTForImageClassification(out.config);
  out.report = checkpoint::load_model_state(*out.model, dir, options);
  return out;
}

}  // namespace colossal::vit
