#include "llama/pretrained.h"

#include <nlohmann/json.hpp>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/parallel/tensor/checkpoint.h"

namespace colossal::llama {

void save_pretrained(const LlamaConfig& config, const checkpoint::NamedTensors& weights,
                     const std::string& dir, const checkpoint::SaveModelOptions& options) {
  checkpoint::save_model_state(weights, dir, options);  // creates dir
  checkpoint::write_text_atomically(dir + "/config.json", config.to_json());
  nlohmann::json gen;
  gen["bos_token_id"] = config.bos_token_id;
  gen["eos_token_id"] = config.eos_token_id;
  if (config.pad_token_id >= 0) gen["pad_token_id"] = config.pad_token_id;
  checkpoint::write_text_atomically(dir + "/generation_config.json", gen.dump(2) + "\n");
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
  out.model = LlamaForCausalLM(out.config, parallel);
  out.report = parallel.tensor_parallel() ? parallel::load_model_slices(*out.model, dir, options)
                                          : checkpoint::load_model_state(*out.model, dir, options);
  return out;
}

}  // namespace colossal::llama
