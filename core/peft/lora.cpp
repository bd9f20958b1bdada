#include "core/peft/lora.h"

#include <fnmatch.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/model_io.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::peft {
namespace {

constexpr const char* kPrefix = "base_model.model.";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// PEFT's rule: a target names a module by its full name or by a suffix after a dot; here "*"
// wildcards are allowed too (matched against the full name and against every suffix).
bool matches(const std::string& target, const std::string& name) {
  if (target.find('*') == std::string::npos) return name == target || ends_with(name, "." + target);
  if (fnmatch(target.c_str(), name.c_str(), 0) == 0) return true;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', dot + 1))
    if (fnmatch(target.c_str(), name.c_str() + dot + 1, 0) == 0) return true;
  return false;
}

std::string joined(const std::vector<std::string>& xs, size_t limit = 12) {
  std::string out;
  for (size_t i = 0; i < xs.size() && i < limit; ++i) out += (i ? ", " : "") + xs[i];
  if (xs.size() > limit) out += ", ... (" + std::to_string(xs.size()) + " in all)";
  return out;
}

}  // namespace

void LoraConfig::validate() const {
  COLOSSAL_CHECK(rank >= 0, "[lora] rank must be >= 0 (0: no adapters), got ", rank);
  COLOSSAL_CHECK(alpha > 0, "[lora] alpha must be positive, got ", alpha);
  COLOSSAL_CHECK(dropout >= 0 && dropout < 1, "[lora] dropout must be in [0, 1), got ", dropout);
  COLOSSAL_CHECK(init == "kaiming" || init == "gaussian" || init == "pissa", "[lora] init '", init,
                 "': expected kaiming, gaussian or pissa");
  COLOSSAL_CHECK(!enabled() || !targets.empty(), "[lora] no target layers (--lora_target)");
  COLOSSAL_CHECK(quantize_base.empty() || quantize_base == "nf4" || quantize_base == "int8" || quantize_base == "int4",
                 "[qlora] --quantize_base '", quantize_base, "': expected nf4, int8 or int4");
  COLOSSAL_CHECK(quantize_base.empty() || enabled(), "[qlora] --quantize_base ", quantize_base,
                 " needs --lora_rank > 0 (QLoRA trains adapters over a frozen quantized base)");
}

LoraLayers enable_lora(torch::nn::Module& model, const LoraConfig& config, const std::vector<std::string>& exclude) {
  config.validate();
  COLOSSAL_CHECK(config.enabled(), "[lora] enable_lora with rank 0");
  LoraLayers out;
  std::vector<std::pair<std::string, std::shared_ptr<parallel::ParallelLinearImpl>>> linears;
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (auto l = std::dynamic_pointer_cast<parallel::ParallelLinearImpl>(item.value())) linears.push_back({item.key(), l});
  std::vector<std::string> names;
  for (const auto& [name, l] : linears) names.push_back(name);
  std::set<std::string> used_targets;
  const parallel::LoraAdapterOptions options{config.rank, config.alpha, config.dropout, config.init, config.seed};
  for (auto& [name, layer] : linears) {
    bool take = false;
    for (const auto& t : config.targets) {
      const bool hit = t == "all-linear" ? std::none_of(exclude.begin(), exclude.end(),
                                                         [&](const std::string& e) { return matches(e, name); })
                                         : matches(t, name);
      if (hit) used_targets.insert(t);
      take = take || hit;
    }
    if (!take) continue;
    COLOSSAL_CHECK(!layer->has_lora(), "[lora] ", name, " already has an adapter (enable_lora was called twice)");
    layer->add_lora(options, name);
    out.adapted.push_back(name);
  }
  for (const auto& t : config.targets)
    COLOSSAL_CHECK(used_targets.count(t), "[lora] target '", t, "' matches no linear layer; the model's are: ",
                   joined(names));
  std::set<std::string> used_save;
  for (auto& item : model.named_parameters()) {
    const std::string& name = item.key();
    bool trainable = is_adapter_tensor(name);
    for (const auto& m : config.modules_to_save)
      if (!trainable && (matches(m + ".*", name) || name.rfind(m + ".", 0) == 0 ||
                         name.find("." + m + ".") != std::string::npos)) {
        trainable = true;
        used_save.insert(m);
        out.trained_in_full.push_back(name);
      }
    item.value().set_requires_grad(trainable);
    (trainable ? out.trainable : out.frozen) += item.value().numel();
  }
  for (const auto& m : config.modules_to_save)
    COLOSSAL_CHECK(used_save.count(m), "[lora] modules_to_save '", m, "' names no module with parameters");
  return out;
}

QuantizedBase quantize_base(torch::nn::Module& model, const std::string& format,
                            const std::vector<std::string>& exclude) {
  const auto f = nn::QuantizedWeight::parse(format);
  QuantizedBase out;
  const auto specs = parallel::collect_shard_specs(model);
  torch::NoGradGuard no_grad;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto layer = std::dynamic_pointer_cast<parallel::ParallelLinearImpl>(item.value());
    const std::string& name = item.key();
    if (!layer || layer->quantized().defined() || layer->options().style == parallel::SplitStyle::kVocabHead ||
        layer->weight.requires_grad() ||
        std::any_of(exclude.begin(), exclude.end(), [&](const std::string& e) { return matches(e, name); }))
      continue;
    // A lazily loaded weight is read here, whole (tensor parallelism quantizes the full matrix
    // and keeps this rank's part: the values one process has); else the layer gathers its own.
    torch::Tensor full;
    const std::string weight_name = name + ".weight";
    if (nn::is_deferred(layer->weight))
      full = nn::initial_full_value(model, weight_name, layer->weight, parallel::split_spec(specs, weight_name));
    out.full_bytes += layer->weight.numel() * 4;
    layer->quantize_base(f, full);
    out.bytes += layer->quantized().bytes();
    out.layers.push_back(name);
  }
  COLOSSAL_CHECK(!out.layers.empty(), "[qlora] --quantize_base ", format, ": no frozen linear layer to quantize");
  return out;
}

bool is_adapter_tensor(const std::string& name) {
  return name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos;
}

checkpoint::NamedTensors adapter_tensors(const checkpoint::NamedTensors& state, const LoraConfig& config) {
  checkpoint::NamedTensors out;
  for (const auto& [name, t] : state) {
    bool keep = is_adapter_tensor(name);
    for (const auto& m : config.modules_to_save)
      keep = keep || name.rfind(m + ".", 0) == 0 || name.find("." + m + ".") != std::string::npos;
    if (keep) out.push_back({name, t});
  }
  return out;
}

void save_adapter(const checkpoint::NamedTensors& tensors, const LoraConfig& config, const std::string& dir,
                  const std::string& base_model) {
  checkpoint::NamedTensors keyed;
  for (const auto& [name, t] : tensors) keyed.push_back({kPrefix + name, t.contiguous()});
  fs::make_dirs(dir);
  checkpoint::save_safetensors(dir + "/adapter_model.safetensors", keyed);
  // Target modules as PEFT lists them: the layers' last names.
  std::set<std::string> leaves;
  for (const auto& [name, t] : tensors) {
    if (!is_adapter_tensor(name)) continue;
    const std::string layer = name.substr(0, name.find(".lora_"));
    leaves.insert(layer.substr(layer.rfind('.') + 1));
  }
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"r", config.rank},
                      {"lora_alpha", config.alpha},
                      {"lora_dropout", config.dropout},
                      {"target_modules", std::vector<std::string>(leaves.begin(), leaves.end())},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"use_rslora", false},
                      {"use_dora", false},
                      {"init_lora_weights", true},
                      {"inference_mode", true},
                      {"base_model_name_or_path", base_model.empty() ? nlohmann::json(nullptr) : nlohmann::json(base_model)}};
  j["modules_to_save"] = config.modules_to_save.empty() ? nlohmann::json(nullptr) : nlohmann::json(config.modules_to_save);
  checkpoint::write_text_atomically(dir + "/adapter_config.json", j.dump(2) + "\n");
}

LoraConfig read_adapter_config(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[lora] cannot read '", path, "' (a PEFT adapter directory holds adapter_config.json "
                 "and adapter_model.safetensors)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[lora] '", path, "' is not valid JSON: ", e.what());
  }
  auto field = [&](const char* key) -> const nlohmann::json* {
    return j.contains(key) && !j[key].is_null() ? &j[key] : nullptr;
  };
  const std::string type = field("peft_type") ? j["peft_type"].get<std::string>() : "";
  COLOSSAL_CHECK(type == "LORA", "[lora] '", path, "': peft_type is \"", type, "\"; LORA adapters are read");
  for (const char* key : {"use_dora", "use_rslora"})
    COLOSSAL_CHECK(!field(key) || !j[key].get<bool>(), "[lora] '", path, "': ", key, " true is not supported");
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    COLOSSAL_CHECK(!field(key) || j[key].empty(), "[lora] '", path, "': ", key,
                   " (per-layer ranks or alphas) is not supported");
  COLOSSAL_CHECK(!field("bias") || j["bias"] == "none", "[lora] '", path, "': bias ", j["bias"].dump(),
                 " is not supported (\"none\")");
  COLOSSAL_CHECK(!field("fan_in_fan_out") || !j["fan_in_fan_out"].get<bool>(), "[lora] '", path,
                 "': fan_in_fan_out true (GPT-2's Conv1D layers) is not supported");
  LoraConfig c;
  COLOSSAL_CHECK(field("r") && j["r"].is_number_integer(), "[lora] '", path, "': field 'r' (the rank) is missing");
  c.rank = j["r"].get<int64_t>();
  if (field("lora_alpha")) c.alpha = j["lora_alpha"].get<double>();
  if (field("lora_dropout")) c.dropout = j["lora_dropout"].get<double>();
  c.targets.clear();
  if (const auto* t = field("target_modules")) {
    if (t->is_string()) c.targets.push_back(*t == "all-linear" ? "all-linear" : t->get<std::string>());
    else for (const auto& x : *t) c.targets.push_back(x.get<std::string>());
  }
  if (const auto* m = field("modules_to_save"))
    for (const auto& x : *m) c.modules_to_save.push_back(x.get<std::string>());
  c.validate();
  return c;
}

checkpoint::NamedTensors read_adapter_tensors(const std::string& dir) {
  checkpoint::CheckpointReader reader(dir, "adapter_model");
  checkpoint::NamedTensors out;
  for (const auto& key : reader.names()) {
    std::string name = key.rfind(kPrefix, 0) == 0 ? key.substr(std::string(kPrefix).size()) : key;
    // PEFT names a layer's adapter by its adapter name in memory ("lora_A.default.weight") and
    // without it in files; modules_to_save are stored as "<module>.modules_to_save.default.*" in
    // memory and as "<module>.*" in files.
    for (const char* tag : {".lora_A.default.", ".lora_B.default."}) {
      const size_t at = name.find(tag);
      if (at != std::string::npos) name.replace(at, std::string(tag).size(), std::string(tag).substr(0, 8));
    }
    out.push_back({name, reader.load(key)});
  }
  COLOSSAL_CHECK(!out.empty(), "[lora] '", dir, "' holds no adapter tensors");
  return out;
}

LoraConfig load_adapter(torch::nn::Module& model, const std::string& dir, const std::vector<std::string>& exclude) {
  auto config = read_adapter_config(dir);
  const auto tensors = read_adapter_tensors(dir);
  // PEFT lists modules_to_save that the model may name differently; keep only what the file has.
  enable_lora(model, config, exclude);
  std::map<std::string, at::Tensor> params;
  for (auto& item : model.named_parameters()) params[item.key()] = item.value();
  const auto specs = parallel::collect_shard_specs(model);
  std::set<std::string> filled;
  torch::NoGradGuard no_grad;
  for (const auto& [name, t] : tensors) {
    auto it = params.find(name);
    COLOSSAL_CHECK(it != params.end(), "[lora] '", dir, "': adapter tensor '", name, "' names no parameter of the "
                   "model (is the adapter for another base model?)");
    const auto* split = parallel::split_spec(specs, name);
    const auto full = parallel::full_shape(it->second, split);
    COLOSSAL_CHECK(t.sizes().vec() == full, "[lora] '", dir, "': adapter tensor '", name, "' is ", t.sizes(),
                   ", the model's is ", at::IntArrayRef(full), " (an adapter for another base model, or another rank)");
    it->second.copy_(parallel::local_part(t.to(torch::kFloat), split, it->second));
    filled.insert(name);
  }
  for (const auto& [name, p] : params)
    COLOSSAL_CHECK(!is_adapter_tensor(name) || filled.count(name), "[lora] '", dir, "': the adapter has no '", name,
                   "' although its config targets that layer");
  return config;
}

int merge_lora(torch::nn::Module& model) {
  int merged = 0;
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (auto l = std::dynamic_pointer_cast<parallel::ParallelLinearImpl>(item.value()); l && l->has_lora()) {
      l->merge_lora();
      ++merged;
    }
  return merged;
}

namespace {
checkpoint::NamedTensors merged_with(const checkpoint::NamedTensors& state,
                                     const std::function<double(const std::string& layer)>& scaling_of) {
  std::map<std::string, at::Tensor> by_name(state.begin(), state.end());
  checkpoint::NamedTensors out;
  for (const auto& [name, t] : state) {
    if (is_adapter_tensor(name)) continue;
    if (ends_with(name, ".weight")) {
      const std::string layer = name.substr(0, name.size() - 7);
      auto a = by_name.find(layer + ".lora_A.weight"), b = by_name.find(layer + ".lora_B.weight");
      if (a != by_name.end() && b != by_name.end()) {
        auto delta = b->second.to(torch::kFloat64).matmul(a->second.to(torch::kFloat64)) * scaling_of(layer);
        out.push_back({name, (t.to(torch::kFloat64) + delta).to(t.scalar_type())});
        continue;
      }
    }
    out.push_back({name, t});
  }
  return out;
}
}  // namespace

checkpoint::NamedTensors merged_state(const checkpoint::NamedTensors& state, const LoraConfig& config) {
  const double scaling = config.alpha / static_cast<double>(config.rank);
  return merged_with(state, [scaling](const std::string&) { return scaling; });
}

checkpoint::NamedTensors merged_state(const checkpoint::NamedTensors& state, const torch::nn::Module& model) {
  std::map<std::string, double> scalings;
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (auto l = std::dynamic_pointer_cast<parallel::ParallelLinearImpl>(item.value()); l && l->has_lora())
      scalings[item.key()] = l->lora_scaling();
  return merged_with(state, [&](const std::string& layer) {
    auto it = scalings.find(layer);
    COLOSSAL_CHECK(it != scalings.end(), "[lora] merge: '", layer, "' has adapter tensors but no adapted layer");
    return it->second;
  });
}

checkpoint::NamedTensors merge_adapter_into_checkpoint(const std::string& base_dir, const std::string& adapter_dir) {
  const auto config = read_adapter_config(adapter_dir);
  const auto adapter = read_adapter_tensors(adapter_dir);
  checkpoint::CheckpointReader base(base_dir);
  std::map<std::string, at::Tensor> replaced;
  checkpoint::NamedTensors state;
  for (const auto& [name, t] : adapter) {
    if (is_adapter_tensor(name)) {
      const std::string layer = name.substr(0, name.find(".lora_"));
      COLOSSAL_CHECK(base.contains(layer + ".weight"), "[lora] merge: adapter tensor '", name, "' of ", adapter_dir,
                     " has no layer '", layer, ".weight' in ", base_dir, " (is it this adapter's base model?)");
      const auto& w = base.info(layer + ".weight").shape;
      const bool is_a = name.find(".lora_A.") != std::string::npos;
      const bool fits = t.dim() == 2 && w.size() == 2 && t.size(0) == (is_a ? config.rank : w[0]) &&
                        t.size(1) == (is_a ? w[1] : config.rank);
      COLOSSAL_CHECK(fits, "[lora] merge: ", name, " is ", t.sizes(), " but ", layer, ".weight in ", base_dir, " is [",
                     w.size() == 2 ? std::to_string(w[0]) + ", " + std::to_string(w[1]) : std::string("?"),
                     "] (expected ", is_a ? "[rank, in]" : "[out, rank]", " with rank ", config.rank, ")");
      state.push_back({name, t});
    } else {
      COLOSSAL_CHECK(base.contains(name), "[lora] merge: '", name, "' of ", adapter_dir, " is not in ", base_dir);
      COLOSSAL_CHECK(base.info(name).shape == t.sizes().vec(), "[lora] merge: ", name, " is ", t.sizes(), " in ",
                     adapter_dir, " but differs in ", base_dir);
      replaced[name] = t;
    }
  }
  for (const auto& name : base.names()) {
    auto it = replaced.find(name);
    state.push_back({name, it != replaced.end() ? it->second.to(base.info(name).dtype) : base.view(name)});
  }
  return merged_state(state, config);
}

MergedModel write_merged_model(const std::string& base_dir, const std::string& adapter_dir, const std::string& output,
                               std::optional<c10::ScalarType> dtype) {
  COLOSSAL_CHECK(fs::is_directory(base_dir), "[merge] base model ", base_dir, ": no such directory");
  COLOSSAL_CHECK(fs::is_directory(adapter_dir), "[merge] adapter ", adapter_dir, ": no such directory");
  COLOSSAL_CHECK(output != base_dir, "[merge] the output must differ from the base (", base_dir,
                 "): the base is read while the merged model is written");
  MergedModel out;
  auto state = merge_adapter_into_checkpoint(base_dir, adapter_dir);
  out.tensors = state.size();
  for (const auto& [n, t] : state) out.bytes += t.numel() * static_cast<int64_t>(t.element_size());
  checkpoint::SaveModelOptions options;
  options.dtype = dtype;
  options.shard = out.bytes > (int64_t{5} << 30);
  fs::make_dirs(output);
  checkpoint::save_model_state(state, output, options);
  for (const auto& f : fs::list_dir(base_dir)) {
    const bool weights = f.find(".safetensors") != std::string::npos || f.rfind("pytorch_model", 0) == 0;
    if (weights || fs::is_directory(base_dir + "/" + f)) continue;
    fs::copy_file(base_dir + "/" + f, output + "/" + f);
    ++out.other_files;
  }
  return out;
}

std::vector<std::string> split_names(const std::vector<std::string>& values) {
  std::vector<std::string> out;
  for (const auto& v : values) {
    size_t start = 0;
    while (start <= v.size()) {
      const size_t comma = v.find(',', start);
      const std::string part = v.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace colossal::peft
