#include "sora/data/latent_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>

#include "core/checkpoint/integrity.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/check.h"

namespace colossal::sora {
namespace {

// 64 bits from two CRC32C passes with different seeds: enough that a changed VAE or clip is
// never mistaken for the one the cache came from.
struct Fingerprint {
  uint32_t a = 0, b = 0x9E3779B9u;
  void add(const void* data, size_t n) {
    a = checkpoint::crc32c(data, n, a);
    b = checkpoint::crc32c(data, n, b);
  }
  void add(const std::string& s) { add(s.data(), s.size()); }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%08x%08x", a, b);
    return buf;
  }
};

const char* kKey = "colossal.latent_cache.key";
const char* kScale = "colossal.latent_cache.scale";
const char* kCaptions = "colossal.latent_cache.captions";
const char* kClips = "colossal.latent_cache.clips";

}  // namespace

std::string weights_fingerprint(const torch::nn::Module& module) {
  Fingerprint f;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    const auto c = t.detach().to(torch::kCPU).contiguous();
    f.add(name + c10::str(c.sizes()) + c10::toString(c.scalar_type()));
    f.add(c.data_ptr(), c.nbytes());
  };
  for (const auto& p : module.named_parameters()) add(p.key(), p.value());
  for (const auto& b : module.named_buffers()) add(b.key(), b.value());
  return f.hex();
}

nlohmann::json clip_fingerprint(const std::string& csv_path, const std::vector<std::string>& clip_paths) {
  std::ifstream in(csv_path, std::ios::binary);
  COLOSSAL_CHECK(in.good(), "[latent cache] cannot read the dataset CSV '", csv_path, "'");
  Fingerprint csv;
  csv.add(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()));
  nlohmann::json clips = nlohmann::json::array();
  for (const auto& path : clip_paths) {
    struct stat st {};
    COLOSSAL_CHECK(::stat(path.c_str(), &st) == 0, "[latent cache] cannot stat the clip '", path, "' listed in '",
                   csv_path, "'");
    clips.push_back({path, static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec),
                     static_cast<int64_t>(st.st_mtim.tv_nsec)});
  }
  return {{"csv", csv_path}, {"csv_hash", csv.hex()}, {"clips", clips}};
}

nlohmann::json latent_cache_key(const std::string& vae_fingerprint, const nlohmann::json& data) {
  return {{"version", 2}, {"vae", vae_fingerprint}, {"data", data}};
}

std::optional<LatentCache> open_latent_cache(const std::string& path, const nlohmann::json& key, std::string* why) {
  if (::access(path.c_str(), F_OK) != 0) {
    if (why) *why = "no cache at " + path;
    return std::nullopt;
  }
  const auto file = checkpoint::SafetensorsFile::open(path);
  const auto& meta = file->metadata();
  auto field = [&](const char* name) -> const std::string& {
    auto it = meta.find(name);
    COLOSSAL_CHECK(it != meta.end(), "[latent cache] '", path, "': no '", name, "' in its metadata (not a latent cache?)");
    return it->second;
  };
  const auto stored = nlohmann::json::parse(field(kKey));
  if (stored != key) {
    if (why) {
      *why = path + " is stale:";
      for (const auto& [name, value] : key.items())
        if (!stored.contains(name) || stored[name] != value) {
          *why += " its " + name + " differs";
          break;
        }
    }
    return std::nullopt;
  }
  LatentCache cache;
  cache.scale = std::stod(field(kScale));
  const auto captions = nlohmann::json::parse(field(kCaptions)), clips = nlohmann::json::parse(field(kClips));
  for (auto [split, name] : {std::pair{&cache.train, "train"}, std::pair{&cache.held_out, "held_out"}}) {
    split->latents = file->view(name);  // mapped, not copied; keeps the mapping alive
    split->captions = captions.at(name).get<std::vector<std::string>>();
    split->clips = clips.at(name).get<std::vector<int64_t>>();
    COLOSSAL_CHECK(static_cast<int64_t>(split->captions.size()) == split->latents.size(0) &&
                       split->clips.size() == split->captions.size(),
                   "[latent cache] '", path, "': ", split->captions.size(), " ", name, " captions and ",
                   split->clips.size(), " clip indices for ", split->latents.size(0), " windows");
  }
  return cache;
}

void write_latent_cache(const std::string& path, const nlohmann::json& key, const LatentCache& cache) {
  const nlohmann::json captions = {{"train", cache.train.captions}, {"held_out", cache.held_out.captions}};
  const nlohmann::json clips = {{"train", cache.train.clips}, {"held_out", cache.held_out.clips}};
  char scale[32];
  std::snprintf(scale, sizeof scale, "%.17g", cache.scale);
  checkpoint::save_safetensors(path, {{"train", cache.train.latents}, {"held_out", cache.held_out.latents}},
                               {{kKey, key.dump()}, {kScale, scale}, {kCaptions, captions.dump()}, {kClips, clips.dump()}});
}

}  // namespace colossal::sora
