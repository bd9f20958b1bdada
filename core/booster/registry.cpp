// The plugin registry: one explicit line per plugin (no static self-registration, which the
// linker may drop from a static library).
#include "core/booster/registry.h"

#include <torch/cuda.h>

#include <set>

#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/booster/plugins/gemini/gemini_plugin.h"
#include "core/booster/plugins/hybrid/hybrid_parallel_plugin.h"
#include "core/booster/plugins/low_level_zero/low_level_zero_plugin.h"
#include "core/common/check.h"
#include "core/dist/runtime.h"

namespace colossal::booster {
namespace {

// A plugin's Options read from the config: the precision from the config, the rest by name.
template <class P>
typename P::Options options_from(const PluginConfig& config, const ConfigNode& node) {
  typename P::Options o;
  o.precision = config.precision;
  read_options(o, node);
  return o;
}

template <class P>
std::shared_ptr<Plugin> make(const PluginConfig& c, const ConfigNode& node, PluginEnvironment env) {
  return std::make_shared<P>(options_from<P>(c, node), std::move(env));
}

// zero1 / zero2: ZeRO with the stage fixed by the name (a different zero_stage is a conflict).
template <int Stage>
std::shared_ptr<Plugin> make_zero(const PluginConfig& c, const ConfigNode& node, PluginEnvironment env) {
  auto o = options_from<LowLevelZeroPlugin>(c, node);
  COLOSSAL_CHECK(!node.has("zero_stage") || o.stage == Stage, "[booster] plugin 'zero", Stage,
                 "' is ZeRO stage ", Stage, " but zero_stage ", o.stage, " was given (",
                 c.origin.count("zero_stage") ? c.origin.at("zero_stage") : "config",
                 "); use --plugin zero --zero_stage N");
  o.stage = Stage;
  return std::make_shared<LowLevelZeroPlugin>(o, std::move(env));
}

template <class P>
std::vector<OptionInfo> options_of() {
  return list_options(typename P::Options{});
}

struct Entry {
  const char* name;
  const char* summary;
  bool splits_model;
  std::vector<OptionInfo> (*options)();
  std::shared_ptr<Plugin> (*make)(const PluginConfig&, const ConfigNode&, PluginEnvironment);
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = {
      {"ddp", "data parallelism: gradients all-reduced in buckets during backward", false,
       options_of<DDPPlugin>, make<DDPPlugin>},
      {"zero", "ZeRO-1/2 over the data-parallel ranks (zero_stage)", false, options_of<LowLevelZeroPlugin>,
       make<LowLevelZeroPlugin>},
      {"zero1", "ZeRO stage 1: optimizer state sharded", false, options_of<LowLevelZeroPlugin>, make_zero<1>},
      {"zero2", "ZeRO stage 2: optimizer state and gradients sharded", false, options_of<LowLevelZeroPlugin>,
       make_zero<2>},
      {"gemini", "ZeRO-3 with chunks and heterogeneous placement (CPU/NVMe offload)", false,
       options_of<GeminiPlugin>, make<GeminiPlugin>},
      {"zero3", "the gemini plugin", false, options_of<GeminiPlugin>, make<GeminiPlugin>},
      {"hybrid", "tensor x sequence x data parallelism (--tp --sp --sp_mode), DDP or ZeRO-1/2 over dp", true,
       options_of<HybridParallelPlugin>, make<HybridParallelPlugin>},
  };
  return entries;
}

const Entry& find_entry(const std::string& name) {
  std::string known;
  for (const auto& e : registry()) {
    if (name == e.name) return e;
    known += (known.empty() ? "" : ", ") + std::string(e.name);
  }
  COLOSSAL_FAIL("[booster] unknown plugin '", name, "' (known: ", known, "; --plugin help lists their options)");
}

}  // namespace

c10::Device resolve_device(const std::string& device) {
  const int local = dist::is_initialized() ? dist::environment().local_rank : 0;
  if (device == "cpu") return c10::kCPU;
  if (device == "auto") {
    if (!torch::cuda::is_available()) return c10::kCPU;
    return {c10::kCUDA, static_cast<c10::DeviceIndex>(local % torch::cuda::device_count())};
  }
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    COLOSSAL_CHECK(torch::cuda::is_available(), "[booster] device '", device,
                   "': no CUDA GPU is visible to this process (or LibTorch was built without CUDA); use --device cpu");
    const int count = static_cast<int>(torch::cuda::device_count());
    int index = local;
    if (device != "cuda") {
      try {
        index = std::stoi(device.substr(5));
      } catch (const std::exception&) {
        COLOSSAL_FAIL("[booster] device '", device, "': expected cuda:N with N a GPU index");
      }
    }
    COLOSSAL_CHECK(index >= 0 && index < count, "[booster] device '", device, "': GPU ", index,
                   " does not exist (", count, " visible)");
    return {c10::kCUDA, static_cast<c10::DeviceIndex>(index)};
  }
  COLOSSAL_FAIL("[booster] device '", device, "': expected auto, cpu, cuda or cuda:N");
}

std::shared_ptr<Plugin> make_plugin(const PluginConfig& config) {
  const Entry& e = find_entry(config.name);
  // Every option key must be one of this plugin's: a misspelt or misplaced one is an error.
  const auto known = e.options();
  std::set<std::string> names;
  for (const auto& o : known) names.insert(o.name);
  for (auto it = config.options.begin(); it != config.options.end(); ++it) {
    if (names.count(it.key())) continue;
    std::string list;
    for (const auto& o : known) list += (list.empty() ? "" : ", ") + o.name;
    auto where = config.origin.find(it.key());
    const bool from_flag = where != config.origin.end() && where->second.rfind("flag", 0) == 0;
    // A config file mixes the program's settings with the plugin's: a key that is neither may be
    // a misspelt setting of the program.
    COLOSSAL_FAIL("[booster] plugin '", config.name, "' has no option '", it.key(), "'",
                  where != config.origin.end() ? " (from " + where->second + ")" : std::string(),
                  "; its options: ", list.empty() ? "none" : list, " (--plugin help lists every plugin's)",
                  from_flag || where == config.origin.end() ? "" : ". Nor is it a setting of this program: misspelt?");
  }
  // What the plugin can run first (the more useful message), then the layout against the world.
  if (!e.splits_model) {
    const auto& l = config.layout;
    COLOSSAL_CHECK(l.tp == 1 && l.sp == 1 && l.pp == 1 && l.ep == 1 && l.sp_mode == "none", "[booster] plugin '",
                   config.name, "' is data parallel only; the layout ", l.describe(),
                   " splits the model: use --plugin hybrid");
    COLOSSAL_CHECK(!l.fp8_communication, "[booster] --fp8_communication compresses the activations that tensor, "
                   "sequence, expert and pipeline parallelism exchange; plugin '", config.name, "' is data parallel "
                   "only (its gradients and parameters travel exact): use --plugin hybrid, or drop the flag");
  }
  auto dims = std::make_shared<const dist::ParallelDims>(config.layout);
  auto node = ConfigNode::from_json(config.options, "plugin '" + config.name + "' options");
  amp::Fp8LinearOptions fp8;
  fp8.scaling = amp::parse_fp8_scaling(config.fp8_scaling);
  auto plugin = e.make(config, node, PluginEnvironment{dims, resolve_device(config.device), fp8});
  COLOSSAL_CHECK(config.precision != "fp8" || plugin->supports_fp8(), "[booster] --mixed_precision fp8 runs under the "
                 "ddp, zero1/zero2 and hybrid plugins (their linear layers in FP8, fp32 masters); plugin '", config.name,
                 "' keeps its parameters in chunks it casts itself: use bf16 with it, or one of those");
  node.check_all_keys_used();
  return plugin;
}

std::shared_ptr<Plugin> make_plugin(const std::string& name, const std::string& precision) {
  PluginConfig c;
  c.name = name;
  c.precision = precision;
  c.device = "cpu";
  return make_plugin(c);
}

std::vector<std::string> plugin_names() {
  std::vector<std::string> names;
  for (const auto& e : registry()) names.push_back(e.name);
  return names;
}

std::vector<PluginInfo> plugin_infos() {
  std::vector<PluginInfo> out;
  for (const auto& e : registry()) out.push_back({e.name, e.summary, e.options(), e.splits_model});
  return out;
}

std::string plugins_help() {
  auto line = [](const OptionInfo& o, const char* indent) {
    std::string head = indent + o.name + " (" + o.type + ", default " + o.default_value + ")";
    if (head.size() < 58) head.resize(58, ' ');
    return head + " " + o.help + (o.rule.empty() ? "" : " [" + o.rule + "]") + "\n";
  };
  std::string s =
      "Plugins (--plugin NAME). Each option is a flag (--NAME VALUE) and a config-file key of the same name:\n";
  for (const auto& p : plugin_infos()) {
    s += "\n  " + p.name + ": " + p.summary + "\n";
    for (const auto& o : p.options) s += line(o, "      ");
  }
  s += "\nEvery plugin: the job's plugin, precision, device and layout (the layout's axes above 1 need hybrid):\n";
  for (const auto& o : list_options(PluginConfig{})) s += line(o, "      ");
  return s;
}

}  // namespace colossal::booster
