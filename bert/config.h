#pragma once
// BERT hyper-parameters, named as in a Hugging Face BertConfig config.json, and the named sizes
// train_bert offers (the shapes of Google's compact BERTs: tiny L2/H128, mini L4/H256,
// small L4/H512, medium L8/H512, base L12/H768).
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::bert {

struct BertConfig {
  int64_t vocab_size = 30522, hidden_size = 768, num_hidden_layers = 12, num_attention_heads = 12;
  int64_t intermediate_size = 3072, max_position_embeddings = 512, type_vocab_size = 2;
  std::string hidden_act = "gelu";  // gelu (erf) | gelu_new / gelu_pytorch_tanh (tanh) | relu
  double hidden_dropout_prob = 0.1, attention_probs_dropout_prob = 0.1;
  double classifier_dropout = -1;  // < 0: hidden_dropout_prob (config.json's null)
  double layer_norm_eps = 1e-12, initializer_range = 0.02;
  int64_t pad_token_id = 0;
  int64_t num_labels = 2;
  std::vector<std::string> id2label;  // optional class names

  double resolved_classifier_dropout() const {
    return classifier_dropout < 0 ? hidden_dropout_prob : classifier_dropout;
  }
  /// Parameters of the encoder with its pooler, and of each head (what one process holds).
  int64_t encoder_parameters(bool pooler) const;
  int64_t masked_lm_parameters() const;        // BertForMaskedLM (the decoder tied to the embeddings)
  int64_t classification_parameters() const;  // BertForSequenceClassification
  /// Throws naming the field when values contradict each other.
  void validate() const;
  /// config.json (model_type bert); names the file and the field on errors, and refuses by name
  /// what this implementation does not do (relative positions, a decoder, cross-attention,
  /// regression and multi-label problems).
  static BertConfig from_json_file(const std::string& path);
  static BertConfig from_json_text(const std::string& text, const std::string& origin);
  /// `architecture`: BertForMaskedLM or BertForSequenceClassification.
  std::string to_json(const std::string& architecture) const;
  /// tiny | mini | small | medium | base, with this vocabulary.
  static BertConfig named(const std::string& name, int64_t vocab_size);
};

}  // namespace colossal::bert
