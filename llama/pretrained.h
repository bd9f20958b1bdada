#pragma once
// Hugging Face model directories: config.json, generation_config.json, the weights
// (model.safetensors, or model-0000i-of-0000N.safetensors + index) and the tokenizer files, which
// open in `transformers` as they are — and the reverse.
#include <map>
#include <string>

#include "core/checkpoint/model_io.h"
#include "llama/config.h"
#include "llama/model.h"
#include "llama/tokenizer.h"

namespace colossal::llama {

/// The files of a model directory besides the weights, by name: config.json,
/// generation_config.json and, given a tokenizer, its files (a SentencePiece model also as
/// tokenizer.json, hf_tokenizer.h).
std::map<std::string, std::string> model_dir_files(const LlamaConfig& config, const text::Tokenizer* tokenizer = nullptr);

/// Writes `weights` (Hugging Face names, e.g. model_state(model) or a plugin's gathered
/// full_model_state) and model_dir_files into `dir`.
void save_pretrained(const LlamaConfig& config, const checkpoint::NamedTensors& weights,
                     const std::string& dir, const checkpoint::SaveModelOptions& options = {},
                     const text::Tokenizer* tokenizer = nullptr);

/// transformers' reward-model class of this family: its causal-LM architecture with
/// "ForSequenceClassification" for "ForCausalLM" (LlamaForSequenceClassification, ...).
std::string reward_architecture(const LlamaConfig& config);

/// A reward model as transformers opens it (AutoModelForSequenceClassification): `weights` (a
/// model with add_score_head) without lm_head.weight, config.json naming reward_architecture with
/// num_labels 1 and pad_token_id = `pad_id` (the score is read at the last token that is not
/// it), and the tokenizer files.
void save_reward_model(const LlamaConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir,
                       const text::Tokenizer& tokenizer, int64_t pad_id);

struct LoadedModel {
  LlamaConfig config;
  LlamaForCausalLM model{nullptr};
  checkpoint::LoadReport report;
  std::vector<std::string> unknown_config_fields;
};

/// Reads `dir`/config.json, builds the model and loads the weights (strict: every difference
/// is an error listing all of them; otherwise the report lists them). With tensor parallelism
/// each rank reads only its slices of the (memory-mapped) files.
LoadedModel load_pretrained(const std::string& dir, const checkpoint::LoadModelOptions& options = {},
                            const parallel::ParallelContext& parallel = {});

/// The same, lazily: the model is built without weights and every parameter is read from the
/// (memory-mapped) checkpoint only when boost() materialises it, straight into what the rank
/// keeps (its ZeRO-3 shards, its tensor-parallel slices). Names and full shapes are checked
/// now, strictly: every difference is an error listing all of them.
LoadedModel load_pretrained_lazily(const std::string& dir, const parallel::ParallelContext& parallel = {});

}  // namespace colossal::llama
