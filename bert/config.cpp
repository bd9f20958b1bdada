#include "bert/config.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/common/check.h"
#include "core/common/log.h"

namespace colossal::bert {

void BertConfig::validate() const {
  COLOSSAL_CHECK(vocab_size >= 1 && hidden_size >= 1 && num_hidden_layers >= 1 && num_attention_heads >= 1 &&
                     intermediate_size >= 1 && max_position_embeddings >= 1 && type_vocab_size >= 1,
                 "[bert] config: vocab_size, hidden_size, num_hidden_layers, num_attention_heads, intermediate_size, "
                 "max_position_embeddings and type_vocab_size must be >= 1");
  COLOSSAL_CHECK(hidden_size % num_attention_heads == 0, "[bert] config: hidden_size ", hidden_size,
                 " is not divisible by num_attention_heads ", num_attention_heads);
  COLOSSAL_CHECK(hidden_act == "gelu" || hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" ||
                     hidden_act == "relu",
                 "[bert] config: hidden_act is \"", hidden_act, "\"; gelu, gelu_new, gelu_pytorch_tanh and relu are "
                 "supported");
  for (double p : {hidden_dropout_prob, attention_probs_dropout_prob})
    COLOSSAL_CHECK(p >= 0 && p < 1, "[bert] config: dropout probabilities must be in [0, 1), got ", p);
  COLOSSAL_CHECK(classifier_dropout < 1, "[bert] config: classifier_dropout must be below 1, got ", classifier_dropout);
  COLOSSAL_CHECK(num_labels >= 1, "[bert] config: num_labels must be >= 1, got ", num_labels);
  COLOSSAL_CHECK(pad_token_id < vocab_size, "[bert] config: pad_token_id ", pad_token_id, " is outside the ",
                 vocab_size, "-token vocabulary");
}

int64_t BertConfig::encoder_parameters(bool pooler) const {
  const int64_t h = hidden_size, i = intermediate_size;
  const int64_t embeddings = (vocab_size + max_position_embeddings + type_vocab_size) * h + 2 * h;
  const int64_t layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h;
  return embeddings + num_hidden_layers * layer + (pooler ? h * h + h : 0);
}

int64_t BertConfig::masked_lm_parameters() const {
  const int64_t h = hidden_size;
  return encoder_parameters(false) + (h * h + h) + 2 * h + vocab_size;  // transform, its norm, the output bias
}

int64_t BertConfig::classification_parameters() const {
  return encoder_parameters(true) + hidden_size * num_labels + num_labels;
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[bert] cannot read '", path, "'");
  std::stringstream text;
  text << in.rdbuf();
  return from_json_text(text.str(), path);
}

BertConfig BertConfig::from_json_text(const std::string& text, const std::string& origin) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[bert] '", origin, "' is not valid JSON: ", e.what());
  }
  COLOSSAL_CHECK(j.is_object(), "[bert] '", origin, "': expected a JSON object");
  // Keys with nothing to do here: bookkeeping, and inference switches of transformers.
  static const std::set<std::string> kIgnored = {
      "architectures", "transformers_version", "torch_dtype", "dtype", "_name_or_path", "use_cache",
      "gradient_checkpointing", "output_attentions", "output_hidden_states", "return_dict", "label2id",
      "directionality", "pooler_fc_size", "pooler_num_attention_heads", "pooler_num_fc_layers",
      "pooler_size_per_head", "pooler_type", "tokenizer_class", "bos_token_id", "eos_token_id",
      "chunk_size_feed_forward", "tie_word_embeddings"};
  std::set<std::string> used;
  BertConfig c;
  auto get = [&](const char* key, auto& field) -> bool {
    if (!j.contains(key)) return false;
    used.insert(key);
    if (j[key].is_null()) return false;
    try {
      field = j[key].get<std::decay_t<decltype(field)>>();
    } catch (const std::exception&) {
      COLOSSAL_FAIL("[bert] '", origin, "': field '", key, "' has the wrong type (", j[key].dump(), ")");
    }
    return true;
  };
  std::string model_type = "bert";
  get("model_type", model_type);
  COLOSSAL_CHECK(model_type == "bert", "[bert] '", origin, "': model_type \"", model_type,
                 "\" is not bert (RoBERTa, ALBERT, DistilBERT and ELECTRA differ in their layout)");
  get("vocab_size", c.vocab_size);
  get("hidden_size", c.hidden_size);
  get("num_hidden_layers", c.num_hidden_layers);
  get("num_attention_heads", c.num_attention_heads);
  get("intermediate_size", c.intermediate_size);
  get("max_position_embeddings", c.max_position_embeddings);
  get("type_vocab_size", c.type_vocab_size);
  get("hidden_act", c.hidden_act);
  get("hidden_dropout_prob", c.hidden_dropout_prob);
  get("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  get("classifier_dropout", c.classifier_dropout);
  get("layer_norm_eps", c.layer_norm_eps);
  get("initializer_range", c.initializer_range);
  get("pad_token_id", c.pad_token_id);
  auto refuse_true = [&](const char* key, const char* why) {
    bool on = false;
    get(key, on);
    COLOSSAL_CHECK(!on, "[bert] '", origin, "': bert: ", key, " true is not supported (", why, ")");
  };
  refuse_true("is_decoder", "this is the encoder; a causal BERT is not built");
  refuse_true("add_cross_attention", "an encoder without a second source");
  std::string positions = "absolute";
  get("position_embedding_type", positions);
  COLOSSAL_CHECK(positions == "absolute", "[bert] '", origin, "': bert: position_embedding_type is \"", positions,
                 "\"; only absolute positions are supported");
  std::string problem = "single_label_classification";
  get("problem_type", problem);
  COLOSSAL_CHECK(problem == "single_label_classification", "[bert] '", origin, "': bert: problem_type is \"",
                 problem, "\"; single_label_classification is supported");
  if (j.contains("id2label") && j["id2label"].is_object()) {
    used.insert("id2label");
    c.num_labels = static_cast<int64_t>(j["id2label"].size());
    c.id2label.assign(static_cast<size_t>(c.num_labels), "");
    for (auto& [k, v] : j["id2label"].items()) {
      size_t i = 0;
      try {
        i = std::stoul(k);
      } catch (const std::exception&) {
        COLOSSAL_FAIL("[bert] '", origin, "': id2label key \"", k, "\" is not a number");
      }
      COLOSSAL_CHECK(i < c.id2label.size() && v.is_string(), "[bert] '", origin, "': id2label key ", k,
                     " is out of range or its name is not a string");
      c.id2label[i] = v.get<std::string>();
    }
  }
  get("num_labels", c.num_labels);
  std::string unknown;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!used.count(it.key()) && !kIgnored.count(it.key())) unknown += (unknown.empty() ? "" : ", ") + it.key();
  if (!unknown.empty()) COLOSSAL_LOG_WARN("[bert] ", origin, ": fields not read: ", unknown);
  try {
    c.validate();
  } catch (const std::exception& e) {
    COLOSSAL_FAIL("[bert] '", origin, "': ", e.what());
  }
  return c;
}

std::string BertConfig::to_json(const std::string& architecture) const {
  nlohmann::json j = {{"model_type", "bert"},
                      {"architectures", {architecture}},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"num_hidden_layers", num_hidden_layers},
                      {"num_attention_heads", num_attention_heads},
                      {"intermediate_size", intermediate_size},
                      {"hidden_act", hidden_act},
                      {"hidden_dropout_prob", hidden_dropout_prob},
                      {"attention_probs_dropout_prob", attention_probs_dropout_prob},
                      {"max_position_embeddings", max_position_embeddings},
                      {"type_vocab_size", type_vocab_size},
                      {"initializer_range", initializer_range},
                      {"layer_norm_eps", layer_norm_eps},
                      {"pad_token_id", pad_token_id},
                      {"position_embedding_type", "absolute"},
                      {"torch_dtype", "float32"}};
  j["classifier_dropout"] = classifier_dropout < 0 ? nlohmann::json(nullptr) : nlohmann::json(classifier_dropout);
  if (architecture == "BertForSequenceClassification") {
    nlohmann::json names = nlohmann::json::object(), ids = nlohmann::json::object();
    for (int64_t i = 0; i < num_labels; ++i) {
      const bool named = i < static_cast<int64_t>(id2label.size()) && !id2label[static_cast<size_t>(i)].empty();
      std::string name = named ? id2label[static_cast<size_t>(i)] : "LABEL_" + std::to_string(i);
      names[std::to_string(i)] = name;
      ids[name] = i;
    }
    j["id2label"] = names;
    j["label2id"] = ids;
    j["problem_type"] = "single_label_classification";
  }
  return j.dump(2) + "\n";
}

BertConfig BertConfig::named(const std::string& name, int64_t vocab_size) {
  BertConfig c;
  c.vocab_size = vocab_size;
  if (name == "tiny") c.num_hidden_layers = 2, c.hidden_size = 128;
  else if (name == "mini") c.num_hidden_layers = 4, c.hidden_size = 256;
  else if (name == "small") c.num_hidden_layers = 4, c.hidden_size = 512;
  else if (name == "medium") c.num_hidden_layers = 8, c.hidden_size = 512;
  else if (name == "base") c.num_hidden_layers = 12, c.hidden_size = 768;
  else COLOSSAL_FAIL("[bert] unknown model size '", name, "' (tiny, mini, small, medium, base, or a config.json)");
  c.num_attention_heads = c.hidden_size / 64;  // 64-wide heads, as Google's compact BERTs
  c.intermediate_size = 4 * c.hidden_size;
  c.validate();
  return c;
}

}  // namespace colossal::bert
