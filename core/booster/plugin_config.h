#pragma once
// What a job asks of the booster, in one value: the plugin by name, the parallel layout, the
// precision, the device, and the plugin's own options. The same names work as keys of a
// YAML/JSON config file and as flags (train_llama --plugin gemini --offload_optim_frac 0.5 ...),
// and make_plugin(config) (registry.h) builds every plugin from it.
//
//   PluginConfig c;
//   c.read(ConfigNode::load_file("train.yaml"));  // plugin, tp, sp, ..., and the plugin's options
//   c.set("bucket_mib", "64", "flag --bucket_mib"); // a flag given on the command line wins
//   auto plugin = make_plugin(c);
#include <nlohmann/json.hpp>

#include <map>
#include <string>

#include "core/common/config.h"
#include "core/common/options.h"
#include "core/dist/parallel_dims.h"

namespace colossal::booster {

struct PluginConfig {
  std::string name = "ddp";
  dist::ParallelDims::Options layout;  // pp, dp, sp, tp, ep, sp_mode, tp_mode, tp_depth, fp8_communication
  std::string precision = "fp32";      // fp32 | bf16 | fp16 | fp8
  std::string fp8_scaling = "current";  // current | delayed
  std::string device = "auto";         // auto (cuda when a GPU is visible) | cpu | cuda | cuda:N
  // The plugin's own options by name (JSON values; text from flags is converted by the option's
  // type when the plugin reads it), and where each came from, for messages.
  nlohmann::json options = nlohmann::json::object();
  std::map<std::string, std::string> origin;

  /// The general keys, declared once: config-file keys, the apps' flags, `--plugin help`.
  template <class V>
  void visit(V& v) {
    v("plugin", name,
      "ddp | zero | zero1 | zero2 | gemini (= zero3) | hybrid | auto (chosen by measurement); 'help' lists every "
      "plugin's options");
    v("mixed_precision", precision,
      "compute and gradient precision (fp32 masters under bf16/fp16/fp8; fp8: bf16 with linear layers in FP8)",
      one_of({"fp32", "bf16", "fp16", "fp8"}).also("precision"));
    v("fp8_scaling", fp8_scaling, "how --mixed_precision fp8 scales each tensor: current (its own amax) or "
      "delayed (the largest amax of the last 16 steps)", one_of({"current", "delayed"}));
    v("device", device, "auto (cuda when a GPU is visible, rank -> LOCAL_RANK's GPU) | cpu | cuda | cuda:N");
    v("tp", layout.tp, "tensor-parallel size (hybrid)", at_least(1));
    v("sp", layout.sp, "sequence-parallel size (hybrid)", at_least(1));
    v("sp_mode", layout.sp_mode, "how sequences split (hybrid, sp > 1)",
      one_of({"none", "split_gather", "all_to_all", "ring_attn"}));
    v("tp_mode", layout.tp_mode, "how tensor parallelism splits layers (hybrid): 1d (Megatron), 2d (a q x q grid), "
      "2.5d (q x q x tp_depth), 3d (a q x q x q cube)", one_of({"1d", "2d", "2.5d", "3d"}));
    v("tp_depth", layout.tp_depth, "the depth of a 2.5d grid (tp = q^2 x tp_depth)", at_least(1));
    v("dp", layout.dp, "data-parallel size (0: what the world leaves)", at_least(0));
    v("pp", layout.pp, "pipeline-parallel size (hybrid)", at_least(1));
    v("ep", layout.ep, "expert-parallel size (hybrid, a mixture-of-experts model; divides dp)", at_least(1));
    v("fp8_communication", layout.fp8_communication, "the activations and gradients that tp, sp, ep and pp exchange "
      "(all-gathers, all-to-alls, pipeline sends) travel as FP8 with per-chunk scales (hybrid)");
  }

  /// Sets one setting from text (a flag): a general key, or a plugin option. `where` names the
  /// source in messages ("flag --tp").
  void set(const std::string& key, const std::string& text, const std::string& where = "");
  /// Reads the general keys present in `node` ("plugin", "tp", ..., "mixed_precision" or
  /// "precision", "device") and takes every key that nothing has read yet as a plugin option.
  /// Call it after the application has read its own keys.
  void read(const ConfigNode& node);

  /// "gemini, fp32 on cpu, pp 1 x dp auto x sp 1 x tp 1, placement=auto offload_optim_frac=0.5"
  std::string describe() const;
};

}  // namespace colossal::booster
