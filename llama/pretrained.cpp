#include "llama/pretrained.h"

#include <nlohmann/json.hpp>

#include <set>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/tensor/shard.h"
#include "core/parallel/tensor/checkpoint.h"
#include "llama/gpt2_layout.h"
#include "llama/hf_tokenizer.h"

namespace colossal::llama {

std::map<std::string, std::string> model_dir_files(const LlamaConfig& config, const text::Tokenizer* tokenizer) {
  std::map<std::string, std::string> files;
  if (const auto* sp = dynamic_cast<const Tokenizer*>(tokenizer)) files = hf_tokenizer_files(*sp, config.max_position_embeddings);
  else if (tokenizer) files = tokenizer->files();
  files["config.json"] = config.to_json();
  nlohmann::json gen;
  gen["bos_token_id"] = config.bos_token_id;
  gen["eos_token_id"] = config.eos_token_id;
  if (config.pad_token_id >= 0) gen["pad_token_id"] = config.pad_token_id;
  files["generation_config.json"] = gen.dump(2) + "\n";
  return files;
}

void save_pretrained(const LlamaConfig& config, const checkpoint::NamedTensors& weights,
                     const std::string& dir, const checkpoint::SaveModelOptions& options,
                     const text::Tokenizer* tokenizer) {
  // GPT-2 in its own names and Conv1D layout, as transformers opens it.
  checkpoint::save_model_state(config.model_type == "gpt2" ? to_gpt2_checkpoint(weights, config) : weights, dir,
                               options);  // creates dir
  for (const auto& [name, bytes] : model_dir_files(config, tokenizer)) {
    checkpoint::write_text_atomically(dir + "/" + name, bytes);
  }
}

std::string reward_architecture(const LlamaConfig& config) {
  COLOSSAL_CHECK(config.model_type != "gpt2", "[llama] reward models of the GPT-2 family are not supported yet");
  auto js = nlohmann::json::parse(model_dir_files(config).at("config.json"));
  std::string arch = js.at("architectures").at(0).get<std::string>();
  const std::string causal = "ForCausalLM";
  const auto at = arch.rfind(causal);
  COLOSSAL_CHECK(at != std::string::npos, "[llama] no sequence-classification class for architecture ", arch);
  return arch.replace(at, causal.size(), "ForSequenceClassification");
}

void save_reward_model(const LlamaConfig& config, const checkpoint::NamedTensors& weights, const std::string& dir,
                       const text::Tokenizer& tokenizer, int64_t pad_id) {
  checkpoint::NamedTensors kept;
  bool scored = false;
  for (const auto& [name, t] : weights) {
    if (name == "lm_head.weight") continue;
    scored = scored || name == "score.weight";
    kept.emplace_back(name, t);
  }
  COLOSSAL_CHECK(scored, "[llama] save_reward_model: the weights hold no score.weight (add_score_head)");
  checkpoint::save_model_state(kept, dir);
  auto files = model_dir_files(config, &tokenizer);
  auto js = nlohmann::ordered_json::parse(files.at("config.json"));
  js["architectures"] = {reward_architecture(config)};
  js["num_labels"] = 1;
  js["id2label"] = {{"0", "LABEL_0"}};
  js["label2id"] = {{"LABEL_0", 0}};
  js["pad_token_id"] = pad_id;
  files["config.json"] = js.dump(2) + "\n";
  files.erase("generation_config.json");  // nothing generates from a reward model
  for (const auto& [name, bytes] : files) checkpoint::write_text_atomically(dir + "/" + name, bytes);
}

LoadedModel load_pretrained(const std::string& dir, const checkpoint::LoadModelOptions& options,
                            const parallel::ParallelContext& parallel) {
  LoadedModel out;
  out.config = LlamaConfig::from_json_file(dir + "/config.json", &out.unknown_config_fields);
  if (!out.unknown_config_fields.empty()) {
    std::string list;
    for (const auto& f : out.unknown_config_fields) list += (list.empty() ? "" : ", ") + f;
    COLOSSAL_LOG_WARN("[llama] ", dir, "/config.json: fields this model does not use: ", list);
  }
  COLOSSAL_CHECK(parallel.ep_size() == 1, "[llama] load_pretrained builds the whole model; under expert parallelism "
                 "use load_pretrained_lazily (each rank reads only its experts)");
  out.model = LlamaForCausalLM(out.config, parallel);
  auto opts = options;
  if (out.config.model_type == "gpt2")
    opts.adapt = [config = out.config](checkpoint::CheckpointReader& r) { adapt_gpt2_checkpoint(r, config); };
  const bool split = parallel.tensor_parallel() || parallel.grid_parallel();
  out.report = split ? parallel::load_model_slices(*out.model, dir, opts)
                     : checkpoint::load_model_state(*out.model, dir, opts);
  return out;
}

LoadedModel load_pretrained_lazily(const std::string& dir, const parallel::ParallelContext& parallel) {
  LoadedModel out;
  out.config = LlamaConfig::from_json_file(dir + "/config.json", &out.unknown_config_fields);
  {
    nn::DeferredInitGuard deferred;
    out.model = LlamaForCausalLM(out.config, parallel);
  }
  auto reader = std::make_shared<checkpoint::CheckpointReader>(dir);
  if (out.config.model_type == "gpt2") adapt_gpt2_checkpoint(*reader, out.config);
  // Strict, against the full (unsplit) shapes: nothing is read until boost.
  const auto specs = parallel::collect_shard_specs(*out.model);
  auto names = reader->names();
  std::set<std::string> unexpected;
  for (const auto& n : names)
    if (!out.model->expert_held_elsewhere(n)) unexpected.insert(n);  // other ep ranks read those
  for (const auto& item : out.model->named_parameters()) {
    const auto& name = item.key();
    if (!unexpected.erase(name)) {
      out.report.missing.push_back(name);
      continue;
    }
    const auto shape = parallel::full_shape(item.value(), parallel::split_spec(specs, name));
    const auto& info = reader->info(name);
    if (at::IntArrayRef(info.shape) != at::IntArrayRef(shape) || !c10::isFloatingType(info.dtype))
      out.report.mismatched.push_back(name + ": checkpoint " + c10::str(at::IntArrayRef(info.shape), " ", info.dtype) +
                                      ", model " + c10::str(at::IntArrayRef(shape)));
  }
  out.report.unexpected.assign(unexpected.begin(), unexpected.end());
  COLOSSAL_CHECK(out.report.clean(), "[llama] '", dir, "' does not match the model of its config.json: ",
                 out.report.describe());
  out.model->set_weights_source(std::move(reader));
  return out;
}

}  // namespace colossal::llama
