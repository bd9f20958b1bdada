#pragma once
// The latent cache: every training and held-out window encoded once by the frozen VAE, kept in
// one safetensors file that later runs map instead of decoding the clips and running the encoder
// again. The file holds the latents (already scaled to unit variance), the scale, and each
// window's caption and clip; a key written beside them describes what produced them (the VAE's weights,
// the dataset CSV and its clips' sizes and times, the window options), and a cache whose key
// differs is stale: it is rebuilt, never used.
//
// Opening maps the file (SafetensorsFile): the latents are read by the kernel page by page as
// batches touch them, so a cache larger than memory works and costs no load time beyond the one
// verification pass over its checksum.
#include <torch/nn/module.h>
#include <torch/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace colossal::sora {

struct LatentSplit {
  torch::Tensor latents;  // [N, C, T, H, W] float, scaled
  std::vector<std::string> captions;
  std::vector<int64_t> clips;  // each window's clip (its CSV row), for balancing
};

struct LatentCache {
  LatentSplit train, held_out;
  double scale = 1;  // what the VAE's means were multiplied by
};

/// A fingerprint of `module`'s parameters and buffers (names, shapes and bytes): 16 hex digits.
std::string weights_fingerprint(const torch::nn::Module& module);

/// The cache's key from what produced it; `data` describes the dataset (see clip_fingerprint).
nlohmann::json latent_cache_key(const std::string& vae_fingerprint, const nlohmann::json& data);

/// The dataset CSV's path and contents hash plus each clip's size and modification time, so a
/// re-encoded or replaced clip invalidates the cache. Names a clip that cannot be read.
nlohmann::json clip_fingerprint(const std::string& csv_path, const std::vector<std::string>& clip_paths);

/// The cache at `path` when it exists and its key equals `key`; nullopt otherwise, with `why`
/// saying which (missing, or the first field that differs). A damaged file is an error naming it.
std::optional<LatentCache> open_latent_cache(const std::string& path, const nlohmann::json& key, std::string* why);

/// Writes the cache atomically (temporary name, fsync, rename).
void write_latent_cache(const std::string& path, const nlohmann::json& key, const LatentCache& cache);

}  // namespace colossal::sora
