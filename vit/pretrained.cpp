#include "vit/pretrained.h"

#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/parallel/tensor/checkpoint.h"

namespace colossal::vit {

std::string ImageProcessorConfig::to_json() const {
  nlohmann::json j;
  j["image_processor_type"] = "ViTImageProcessor";
  j["do_resize"] = true;
  j["size"] = {{"height", size}, {"width", size}};
  j["resample"] = 2;  // bilinear
  j["do_rescale"] = true;
  j["rescale_factor"] = 1.0 / 255.0;
  j["do_normalize"] = true;
  j["image_mean"] = image_mean;
  j["image_std"] = image_std;
  return j.dump(2) + "\n";
}

ImageProcessorConfig ImageProcessorConfig::from_json_file(const std::string& path, const ViTConfig& model) {
  ImageProcessorConfig p;
  p.size = model.image_size;
  const auto channels = static_cast<size_t>(model.num_channels);
  p.image_mean.assign(channels, 0.5);
  p.image_std.assign(channels, 0.5);
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return p;
  nlohmann::json j;
  try {
    std::ifstream in(path);
    j = nlohmann::json::parse(in);
    if (j.contains("size")) {
      const auto& s = j["size"];
      p.size = s.is_number() ? s.get<int64_t>() : s.value("height", s.value("shortest_edge", p.size));
    }
    if (j.contains("image_mean")) p.image_mean = j["image_mean"].get<std::vector<double>>();
    if (j.contains("image_std")) p.image_std = j["image_std"].get<std::vector<double>>();
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[vit] ", path, ": ", e.what());
  }
  COLOSSAL_CHECK(p.image_mean.size() == channels && p.image_std.size() == channels, "[vit] ", path,
                 ": image_mean and image_std need ", channels, " values (num_channels), got ", p.image_mean.size(),
                 " and ", p.image_std.size());
  return p;
}

void save_pretrained(const ViTConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir,
                     const ImageProcessorConfig& processor) {
  checkpoint::save_model_state(weights, dir);
  checkpoint::write_text_atomically(dir + "/config.json", config.to_json());
  checkpoint::write_text_atomically(dir + "/preprocessor_config.json", processor.to_json());
}

void save_pretrained(const ViTConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir) {
  ImageProcessorConfig p;
  p.size = config.image_size;
  p.image_mean.assign(static_cast<size_t>(config.num_channels), 0.5);
  p.image_std.assign(static_cast<size_t>(config.num_channels), 0.5);
  save_pretrained(config, weights, dir, p);
}

LoadedViT load_pretrained(const std::string& dir, const checkpoint::LoadModelOptions& options,
                          const parallel::ParallelContext& parallel) {
  LoadedViT out;
  out.config = ViTConfig::from_json_file(dir + "/config.json");
  out.processor = ImageProcessorConfig::from_json_file(dir + "/preprocessor_config.json", out.config);
  out.model = ViTForImageClassification(out.config, parallel);
  // Under tensor parallelism each rank copies only its slices out of the memory-mapped files.
  out.report = parallel.tensor_parallel() ? parallel::load_model_slices(*out.model, dir, options)
                                          : checkpoint::load_model_state(*out.model, dir, options);
  return out;
}

}  // namespace colossal::vit
