#pragma once
// BERT with Hugging Face's parameter names, for masked language modelling and sequence
// classification:
//   bert.embeddings.{word_embeddings, position_embeddings, token_type_embeddings, LayerNorm}
//   bert.encoder.layer.N.{attention.self.{query,key,value}, attention.output.{dense,LayerNorm},
//                         intermediate.dense, output.{dense,LayerNorm}}
//   bert.pooler.dense, classifier                          (BertForSequenceClassification)
//   cls.predictions.{transform.dense, transform.LayerNorm, bias}  (BertForMaskedLM; the decoder
//                                                           is the word embedding matrix)
// Absolute learned positions and token types summed with the words, post-LayerNorm blocks (the
// residual added before each norm), GELU, a tanh pooler on the first token. Every
// parameter-owning module runs through colossal::nn::call, so ZeRO-3 gathers it on demand.
//
// Tensor parallelism splits query/key/value and the intermediate layer by output features, the
// attention output and the output layer by input features (Megatron's layout, ViT's plan); the
// embeddings, norms, pooler and heads stay whole. Dropout on the activations every tensor-parallel
// rank holds whole draws the same mask on all of them (a seed shared per forward); attention
// dropout falls on each rank's own heads.
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <string>
#include <vector>

#include "bert/config.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/apply_plan.h"
#include "core/parallel/context.h"
#include "core/parallel/plan.h"

namespace colossal::bert {

using BuildContext = parallel::PlanBuilder;

enum class BertHead { kMaskedLM, kSequenceClassification };
/// "mlm" | "classify" and back; the Hugging Face architecture of each.
BertHead head_from_string(const std::string& name);
std::string architecture_of(BertHead head);
/// The head a config.json's architectures name (BertForMaskedLM / BertForPreTraining: masked LM,
/// BertForSequenceClassification); `fallback` when it names none of them.
BertHead head_of_architectures(const std::vector<std::string>& architectures, BertHead fallback);

class EmbeddingsImpl : public torch::nn::Module {
 public:
  explicit EmbeddingsImpl(const BertConfig& c);
  torch::nn::Embedding word_embeddings{nullptr}, position_embeddings{nullptr}, token_type_embeddings{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
};
TORCH_MODULE(Embeddings);

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(const BertConfig& c, const BuildContext& where);
  parallel::ParallelLinear query{nullptr}, key{nullptr}, value{nullptr};
};
TORCH_MODULE(SelfAttention);

/// A dense layer, optionally followed by a LayerNorm of (its output + the residual): HF's
/// BertSelfOutput / BertOutput (with the norm) and BertIntermediate / BertPooler (without).
class DenseNormImpl : public torch::nn::Module {
 public:
  DenseNormImpl(int64_t in, int64_t out, bool norm, const BertConfig& c, const BuildContext& where);
  parallel::ParallelLinear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
};
TORCH_MODULE(DenseNorm);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const BertConfig& c, const BuildContext& where);
  SelfAttention self{nullptr};
  DenseNorm output{nullptr};
};
TORCH_MODULE(Attention);

class LayerImpl : public torch::nn::Module {
 public:
  LayerImpl(const BertConfig& c, const BuildContext& where);
  Attention attention{nullptr};
  DenseNorm intermediate{nullptr}, output{nullptr};
};
TORCH_MODULE(Layer);

class EncoderImpl : public torch::nn::Module {
 public:
  EncoderImpl(const BertConfig& c, const BuildContext& where);
  std::vector<Layer> layers;  // registered as layer.N
};
TORCH_MODULE(Encoder);

class BertModelImpl : public torch::nn::Module {
 public:
  BertModelImpl(const BertConfig& c, bool pooler, const BuildContext& where);
  Embeddings embeddings{nullptr};
  Encoder encoder{nullptr};
  DenseNorm pooler{nullptr};  // absent for masked LM (BertForMaskedLM has none)
};
TORCH_MODULE(BertModel);

class MaskedLMTransformImpl : public torch::nn::Module {  // cls.predictions.transform
 public:
  MaskedLMTransformImpl(const BertConfig& c, const BuildContext& where);
  parallel::ParallelLinear dense{nullptr};
  torch::nn::LayerNorm LayerNorm{nullptr};
};
TORCH_MODULE(MaskedLMTransform);

class MaskedLMPredictionsImpl : public torch::nn::Module {  // cls.predictions
 public:
  MaskedLMPredictionsImpl(const BertConfig& c, const BuildContext& where);
  MaskedLMTransform transform{nullptr};
  torch::Tensor bias;  // [vocab]; the decoder's weight is the word embedding matrix
};
TORCH_MODULE(MaskedLMPredictions);

class MaskedLMHeadImpl : public torch::nn::Module {  // cls
 public:
  MaskedLMHeadImpl(const BertConfig& c, const BuildContext& where);
  MaskedLMPredictions predictions{nullptr};
};
TORCH_MODULE(MaskedLMHead);

/// BertForMaskedLM or BertForSequenceClassification, as `head` says.
class BertForTaskImpl : public torch::nn::Module, public nn::ParameterInitializer {
 public:
  /// Initialisation as Hugging Face's (normal(0, initializer_range) weights and embeddings, the
  /// padding row zero, zero biases, unit norms), each tensor from its own generator seeded by
  /// init_seed() and its name, so every tp size and a lazily built model start alike.
  BertForTaskImpl(const BertConfig& c, BertHead head, const parallel::ParallelContext& parallel = {});
  /// input_ids [B, N]; attention_mask [B, N] (1: a token, 0: padding; undefined: all tokens);
  /// token_type_ids [B, N] (undefined: zeros). Masked LM: logits [B, N, vocab]; classification:
  /// [B, num_labels].
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask = {},
                        const torch::Tensor& token_type_ids = {});
  /// The encoder's hidden states [B, N, hidden].
  torch::Tensor encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                       const torch::Tensor& token_type_ids);
  /// Masked LM: the vocabulary logits of the positions `rows` of `hidden` flattened [rows, vocab]
  /// (the head computed only where a loss is taken).
  torch::Tensor masked_lm_logits(const torch::Tensor& hidden_rows);
  /// The mean cross entropy: masked LM over labels [B, N] (-100: not predicted); classification
  /// over labels [B]. `logits` (optional) receives what the loss was computed from.
  torch::Tensor loss(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                     const torch::Tensor& token_type_ids, const torch::Tensor& labels,
                     torch::Tensor* logits = nullptr);
  /// Overrides the config's dropout probabilities (hidden, attention and classifier alike).
  void set_dropout(double p);

  const BertConfig& config() const { return config_; }
  BertHead head() const { return head_; }
  const parallel::ParallelContext& parallel_context() const { return parallel_; }
  BertModel bert{nullptr};
  parallel::ParallelLinear classifier{nullptr};
  MaskedLMHead cls{nullptr};

  // nn::ParameterInitializer
  void init_parameter(const std::string& name, torch::Tensor& full) const override;
  uint64_t init_seed() const override { return init_seed_; }
  void set_init_seed(uint64_t seed) override { init_seed_ = seed; }

 private:
  void reset_parameters();
  torch::Tensor layer_forward(Layer& layer, const torch::Tensor& x, const torch::Tensor& mask);
  /// Dropout with this forward's generator (the same mask on every tensor-parallel rank).
  torch::Tensor dropout(const torch::Tensor& x, double p);
  torch::Tensor act(const torch::Tensor& x) const;

  BertConfig config_;
  BertHead head_;
  parallel::ParallelContext parallel_;
  uint64_t init_seed_ = 0;
  at::Generator dropout_gen_;
};
TORCH_MODULE(BertForTask);

/// BERT's rules for being split: heads and the intermediate width by tp; no pipeline stages and
/// no sequence parallelism (sequences of at most 512 tokens). Throws naming what does not divide.
void check_parallel(const BertConfig& config, int tp, int pp, parallel::SequenceParallelMode sp_mode);

/// How tensor parallelism splits the encoder (see the file comment).
parallel::ParallelPlan parallel_plan(const BertConfig& config);

}  // namespace colossal::bert
