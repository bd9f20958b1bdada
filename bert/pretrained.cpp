#include "bert/pretrained.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"
#include "core/parallel/tensor/checkpoint.h"

namespace colossal::bert {
namespace {

bool has_prefix(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }
bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::vector<std::string> architectures_in(const std::string& config_path) {
  std::ifstream in(config_path);
  std::vector<std::string> out;
  try {
    auto j = nlohmann::json::parse(in);
    if (j.contains("architectures") && j["architectures"].is_array())
      for (const auto& a : j["architectures"])
        if (a.is_string()) out.push_back(a.get<std::string>());
  } catch (const std::exception&) {
  }  // BertConfig::from_json_file has already named anything malformed
  return out;
}

}  // namespace

void adapt_bert_checkpoint(checkpoint::CheckpointReader& reader) {
  const bool bare = !reader.contains("bert.embeddings.word_embeddings.weight") &&
                    (reader.contains("embeddings.word_embeddings.weight") ||
                     reader.contains("embeddings.word_embeddings.gamma"));
  for (const auto& name : reader.names()) {
    std::string ours = name;
    if (has_suffix(ours, ".gamma")) ours = ours.substr(0, ours.size() - 6) + ".weight";
    else if (has_suffix(ours, ".beta")) ours = ours.substr(0, ours.size() - 5) + ".bias";
    if (bare && (has_prefix(ours, "embeddings.") || has_prefix(ours, "encoder.") || has_prefix(ours, "pooler.")))
      ours = "bert." + ours;
    // Left out: the decoder tied to the word embeddings (its bias is cls.predictions.bias),
    // BertForPreTraining's next-sentence head, and position ids some checkpoints store.
    if (has_prefix(name, "cls.predictions.decoder.") || has_prefix(name, "cls.seq_relationship.") ||
        has_suffix(name, "embeddings.position_ids")) {
      reader.hide(name);
      continue;
    }
    if (ours == name) continue;
    const auto& info = reader.info(name);
    reader.derive(ours, info.dtype, info.shape, [name](const checkpoint::CheckpointReader& r) { return r.view(name); });
    reader.hide(name);
  }
}

LoadedBert load_pretrained(const std::string& dir, const LoadBertOptions& o, const parallel::ParallelContext& parallel) {
  LoadedBert out;
  out.config = BertConfig::from_json_file(dir + "/config.json");
  const BertHead head = o.head ? *o.head : head_of_architectures(architectures_in(dir + "/config.json"),
                                                                  BertHead::kMaskedLM);
  const int64_t stored_labels = out.config.num_labels;
  if (o.num_labels > 0) {
    out.config.num_labels = o.num_labels;
    if (!o.id2label.empty()) out.config.id2label = o.id2label;
    else if (o.num_labels != stored_labels) out.config.id2label.clear();
  }
  out.model = BertForTask(out.config, head, parallel);
  checkpoint::LoadModelOptions lo{.strict = false, .adapt = &adapt_bert_checkpoint};
  // Under tensor parallelism each rank copies only its slices out of the memory-mapped files.
  out.report = parallel.tensor_parallel() ? parallel::load_model_slices(*out.model, dir, lo)
                                          : checkpoint::load_model_state(*out.model, dir, lo);
  // What a task may replace: its own head (and the pooler that feeds a classifier). Anything of
  // the encoder missing or misshapen means the checkpoint is not this model.
  auto replaceable = [&](const std::string& name) {
    if (head == BertHead::kSequenceClassification) return has_prefix(name, "classifier.") || has_prefix(name, "bert.pooler.");
    return has_prefix(name, "cls.predictions.");
  };
  std::string problems, fresh;
  for (const auto& name : out.report.missing) {
    if (replaceable(name)) fresh += (fresh.empty() ? "" : ", ") + name;
    else problems += "\n  missing: " + name;
  }
  for (const auto& m : out.report.mismatched) {
    const std::string name = m.substr(0, m.find(':'));
    if (head == BertHead::kSequenceClassification && has_prefix(name, "classifier.") &&
        out.config.num_labels != stored_labels) {
      fresh += (fresh.empty() ? "" : ", ") + name;
      // The mismatched tensor kept its initial values: a new classifier for the new labels.
    } else {
      problems += "\n  mismatched: " + m;
    }
  }
  for (const auto& name : out.report.unexpected)  // the other task's head is fine; anything else is not BERT's
    if (!has_prefix(name, "cls.") && !has_prefix(name, "classifier.") && !has_prefix(name, "bert.pooler."))
      problems += "\n  unexpected: " + name;
  COLOSSAL_CHECK(problems.empty(), "[bert] '", dir, "': its weights do not fit a ", architecture_of(head),
                 " of its config.json:", problems);
  out.new_layers = fresh;
  return out;
}

void save_pretrained(const BertConfig& config, BertHead head, const checkpoint::NamedTensors& weights,
                     const std::string& dir) {
  checkpoint::save_model_state(weights, dir);
  checkpoint::write_text_atomically(dir + "/config.json", config.to_json(architecture_of(head)));
}

}  // namespace colossal::bert
