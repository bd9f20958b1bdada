#pragma once
// LoRA (Hu et al., 2021) on any model built from parallel::ParallelLinear layers: adapters
// attached by layer name inside the layers themselves (so every plugin, tensor parallelism and
// ZeRO-3's hooks see them as ordinary parameters), everything else frozen (no gradient, so no
// optimizer state and no gradient communication), and PEFT's adapter files both ways.
//
//   peft::LoraConfig lora{.rank = 8, .alpha = 16, .targets = {"q_proj", "v_proj"}};
//   auto layers = peft::enable_lora(*model, lora);   // before boost (Booster::enable_lora checks it)
//   ... train ...
//   peft::save_adapter(state, lora, dir);            // adapter_config.json + adapter_model.safetensors
//
// Names follow PEFT: a layer's adapter is "<layer>.lora_A.weight" [rank, in] and
// "<layer>.lora_B.weight" [out, rank]; in PEFT's files each key is prefixed "base_model.model.".
#include <torch/nn/module.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"
#include "core/common/options.h"

namespace colossal::peft {

struct LoraConfig {
  int64_t rank = 8;
  double alpha = 16;                  // the adapter's output is scaled by alpha / rank
  double dropout = 0;                 // on each adapter's input, in training
  // Layer names or name suffixes ("q_proj" adapts every "....q_proj"), "*" wildcards allowed;
  // "all-linear": every linear layer but those in `exclude` (a model's output head).
  std::vector<std::string> targets = {"all-linear"};
  std::string init = "kaiming";       // kaiming (PEFT's default) | gaussian | pissa
  std::vector<std::string> modules_to_save;  // modules trained in full beside the adapters (embed_tokens, lm_head)
  uint64_t seed = 0;                  // adapters' initial values derive from (seed, layer name)
  // QLoRA: the frozen base of every linear layer (but `exclude`'s) kept in nf4 | int8 | int4 ("": as loaded).
  std::string quantize_base;

  template <class V>
  void visit(V& v) {
    v("lora_rank", rank, "LoRA rank (0: full fine-tuning)", at_least(0));
    v("lora_alpha", alpha, "LoRA scaling numerator: adapters' outputs are scaled by alpha / rank", above(0));
    v("lora_dropout", dropout, "dropout on each adapter's input", from_up_to(0, 1));
    v("lora_target", targets, "layers to adapt: names or suffixes (q_proj,v_proj), * wildcards, or all-linear");
    v("lora_init", init, "adapter initialisation: kaiming | gaussian | pissa", one_of({"kaiming", "gaussian", "pissa"}));
    v("lora_modules_to_save", modules_to_save, "modules trained in full beside the adapters (embed_tokens, lm_head)");
    v("quantize_base", quantize_base, "QLoRA: keep the frozen base linear weights in nf4 | int8 | int4 (empty: as loaded)",
      one_of({"", "nf4", "int8", "int4"}));
  }
  void validate() const;
  bool enabled() const { return rank > 0; }
};

struct LoraLayers {
  std::vector<std::string> adapted;          // layers given an adapter
  std::vector<std::string> trained_in_full;  // parameters of modules_to_save
  int64_t trainable = 0, frozen = 0;         // parameter counts on this rank
};

/// Attaches adapters to the matching linear layers and freezes every other parameter (but those
/// of modules_to_save). `exclude`: layers "all-linear" leaves out (the output head). Throws for a
/// target that matches no layer, naming it and the linear layers there are.
LoraLayers enable_lora(torch::nn::Module& model, const LoraConfig& config, const std::vector<std::string>& exclude = {});

struct QuantizedBase {
  std::vector<std::string> layers;  // layers whose base is now quantized
  int64_t bytes = 0;                // what their bases hold now on this rank
  int64_t full_bytes = 0;           // what they held in fp32
};

/// QLoRA: quantizes the frozen base weight of every linear layer but the vocabulary head and
/// `exclude`'s (after enable_lora or load_adapter), one layer at a time: a weight not loaded yet
/// (lazy construction) is read through the model's initializer, this rank's slice quantized and
/// the full-precision values dropped, so the whole model never exists in fp32.
QuantizedBase quantize_base(torch::nn::Module& model, const std::string& format,
                            const std::vector<std::string>& exclude = {});

/// True for an adapter tensor's name (".lora_A." or ".lora_B.").
bool is_adapter_tensor(const std::string& name);
/// The tensors a LoRA run changes, from a model's whole state: the adapters and modules_to_save.
checkpoint::NamedTensors adapter_tensors(const checkpoint::NamedTensors& state, const LoraConfig& config);

/// PEFT's adapter directory: adapter_config.json (peft_type LORA, r, lora_alpha, target_modules,
/// ...) and adapter_model.safetensors with keys "base_model.model.<name>". `tensors` are whole
/// (gathered) and named as the model names them.
void save_adapter(const checkpoint::NamedTensors& tensors, const LoraConfig& config, const std::string& dir,
                  const std::string& base_model = "");
/// A PEFT adapter directory's config (rank, alpha, targets, dropout, modules_to_save); throws
/// naming the field for what this implementation does not do (DoRA, rsLoRA, per-layer ranks).
LoraConfig read_adapter_config(const std::string& dir);
/// The adapter's tensors under the model's names ("base_model.model." and PEFT's ".default"
/// adapter names removed).
checkpoint::NamedTensors read_adapter_tensors(const std::string& dir);

/// A PEFT adapter directory onto `model`: adapters attached as its adapter_config.json says (with
/// `exclude` for all-linear, as enable_lora) and its tensors copied in (each rank its slices
/// under tensor parallelism). Throws naming a tensor that fits no layer (name, or shapes) and a
/// layer the adapter left without values. Returns the adapter's config.
LoraConfig load_adapter(torch::nn::Module& model, const std::string& dir, const std::vector<std::string>& exclude = {});

/// Folds every adapter into its base weight (W + alpha/rank B A, in float64) and removes it.
/// Returns how many layers were merged.
int merge_lora(torch::nn::Module& model);
/// The same on a whole (gathered) state: each "<layer>.weight" with its adapter folded in, the
/// adapter tensors left out; what a plain Hugging Face directory holds.
checkpoint::NamedTensors merged_state(const checkpoint::NamedTensors& state, const LoraConfig& config);
/// The same with each layer's scaling read from `model`'s adapted layers.
checkpoint::NamedTensors merged_state(const checkpoint::NamedTensors& state, const torch::nn::Module& model);
/// A Hugging Face checkpoint directory's weights with a PEFT adapter directory folded in (what
/// colossal merge writes): each adapted "<layer>.weight" becomes W + alpha/r B A (computed in
/// float64, stored in W's dtype), tensors of modules_to_save replace the base's, every other
/// tensor is the base's. Throws naming an adapter tensor the base has no layer for, or whose
/// shape does not fit it.
checkpoint::NamedTensors merge_adapter_into_checkpoint(const std::string& base_dir, const std::string& adapter_dir);

struct MergedModel {
  size_t tensors = 0;
  int64_t bytes = 0;
  int other_files = 0;  // config, tokenizer, generation settings copied from the base
};
/// merge_adapter_into_checkpoint written to `output` as a Hugging Face directory (sharded past
/// 5 GB, as transformers does), with the base directory's other files beside it; `dtype`
/// converts floating tensors. What colossal merge does.
MergedModel write_merged_model(const std::string& base_dir, const std::string& adapter_dir, const std::string& output,
                               std::optional<c10::ScalarType> dtype = std::nullopt);

/// Splits a comma-separated list given as one flag value ("q_proj,v_proj") into its names.
std::vector<std::string> split_names(const std::vector<std::string>& values);

}  // namespace colossal::peft
