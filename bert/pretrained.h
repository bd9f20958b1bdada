#pragma once
// Hugging Face BERT directories (config.json + safetensors) in both directions: BertForMaskedLM,
// BertForPreTraining (its masked-LM half), BertForSequenceClassification and bare BertModel
// checkpoints, with the older names some published ones keep (LayerNorm.gamma / beta).
#include <optional>
#include <string>

#include "bert/model.h"
#include "core/checkpoint/model_io.h"
#include "core/checkpoint/safetensors.h"

namespace colossal::bert {

/// Presents a published checkpoint under this model's names: LayerNorm gamma / beta as weight /
/// bias, a bare BertModel's names under "bert.", the tied decoder and the next-sentence head left out.
void adapt_bert_checkpoint(checkpoint::CheckpointReader& reader);

struct LoadedBert {
  BertConfig config;
  BertForTask model{nullptr};
  checkpoint::LoadReport report;
  /// Layers the checkpoint did not have for this head (a classifier over another label count, a
  /// pooler or a masked-LM head missing), left at their initial values; empty when it had all.
  std::string new_layers;
};

struct LoadBertOptions {
  std::optional<BertHead> head;  // default: the one config.json's architectures name
  int64_t num_labels = 0;        // > 0: classify into this many classes (a new classifier if it differs)
  std::vector<std::string> id2label;
};

/// `parallel`: the groups to build the model with (each rank then loads only its slices). Throws
/// naming the tensors when the checkpoint does not fit (anything but a head the task replaces).
LoadedBert load_pretrained(const std::string& dir, const LoadBertOptions& options = {},
                           const parallel::ParallelContext& parallel = {});

/// config.json and model.safetensors for the head's architecture (the whole weights, by name).
void save_pretrained(const BertConfig& config, BertHead head, const checkpoint::NamedTensors& weights,
                     const std::string& dir);

}  // namespace colossal::bert
