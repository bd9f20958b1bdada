#pragma once
// A Vision Transformer with Hugging Face's ViTForImageClassification parameter names:
//   vit.embeddings.{cls_token, position_embeddings, patch_embeddings.projection.{weight,bias}}
//   vit.encoder.layer.N.{layernorm_before, attention.attention.{query,key,value},
//                        attention.output.dense, layernorm_after, intermediate.dense, output.dense}
//   vit.layernorm, classifier
// Patch embedding (a strided convolution), a class token, learned position embeddings
// (bicubically interpolated when the image size differs from the configured one), pre-norm
// encoder blocks with exact GELU, a linear head on the class token. Every parameter-owning module
// runs through colossal::nn::call, so ZeRO-3 gathers it on demand.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <functional>
#include <string>
#include <utility>

#include "core/nn/deferred_init.h"
#include "core/parallel/apply_plan.h"
#include "core/parallel/context.h"
#include "core/parallel/plan.h"
#include "core/parallel/tensor/parallel_norm.h"
#include "vit/config.h"

namespace colossal::vit {

class PatchEmbeddingsImpl : public torch::nn::Module {
 public:
  explicit PatchEmbeddingsImpl(const ViTConfig& c);
  torch::nn::Conv2d projection{nullptr};
};
TORCH_MODULE(PatchEmbeddings);

class EmbeddingsImpl : public torch::nn::Module {
 public:
  explicit EmbeddingsImpl(const ViTConfig& c);
  torch::Tensor forward(const torch::Tensor& pixels);
  torch::Tensor cls_token, position_embeddings;
  PatchEmbeddings patch_embeddings{nullptr};

 private:
  torch::Tensor positions_for(int64_t grid_h, int64_t grid_w);
  int64_t grid_;
};
TORCH_MODULE(Embeddings);

/// Where a layer sits and how the model is split (core's plan builder over ViT's plan).
using BuildContext = parallel::PlanBuilder;

class SelfAttentionImpl : public torch::nn::Module {
 public:
  SelfAttentionImpl(const ViTConfig& c, const BuildContext& where);
  parallel::ParallelLinear query{nullptr}, key{nullptr}, value{nullptr};
};
TORCH_MODULE(SelfAttention);

class DenseImpl : public torch::nn::Module {  // HF's ViTSelfOutput / ViTIntermediate / ViTOutput
 public:
  DenseImpl(int64_t in, int64_t out, const BuildContext& where);
  parallel::ParallelLinear dense{nullptr};
};
TORCH_MODULE(Dense);

class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ViTConfig& c, const BuildContext& where);
  torch::Tensor forward(const torch::Tensor& x);
  SelfAttention attention{nullptr};
  Dense output{nullptr};

 private:
  parallel::ParallelContext parallel_;
  int64_t heads_;  // this rank's heads (all of them without tensor parallelism)
};
TORCH_MODULE(Attention);

class LayerImpl : public torch::nn::Module {
 public:
  LayerImpl(const ViTConfig& c, const BuildContext& where);
  torch::Tensor forward(const torch::Tensor& x);
  parallel::ParallelLayerNorm layernorm_before{nullptr}, layernorm_after{nullptr};
  Attention attention{nullptr};
  Dense intermediate{nullptr}, output{nullptr};

 private:
  parallel::ParallelContext parallel_;
};
TORCH_MODULE(Layer);

class EncoderImpl : public torch::nn::Module {
 public:
  /// Every layer, or under a pipeline layout only this rank's (built lazily, nothing else).
  EncoderImpl(const ViTConfig& c, const BuildContext& where);
  std::vector<Layer> layers;       // registered under their global index (layer.N.*)
  std::vector<int64_t> layer_ids;  // that index, in order
};
TORCH_MODULE(Encoder);

class ViTModelImpl : public torch::nn::Module {
 public:
  /// Under a pipeline layout the embeddings live with the first virtual stage and the final
  /// norm with the last; a stage without them holds empty handles.
  ViTModelImpl(const ViTConfig& c, const BuildContext& where);
  Embeddings embeddings{nullptr};
  Encoder encoder{nullptr};
  parallel::ParallelLayerNorm layernorm{nullptr};
};
TORCH_MODULE(ViTModel);

class ViTForImageClassificationImpl : public torch::nn::Module, public nn::ParameterInitializer {
 public:
  /// With a ParallelContext whose tp group has more than one rank, the encoder is split by
  /// parallel_plan() (each rank its heads and MLP slice); initialisation draws every full tensor
  /// and keeps the slice, so every tp size starts from the weights of one process.
  ///
  /// Each parameter's initial value comes from its own generator, seeded by init_seed() (drawn
  /// from torch's generator when the model is built) and its name (init_parameter): truncated
  /// normal(0, initializer_range) weights, zero biases, unit norms. Built under an
  /// nn::DeferredInitGuard the model holds no weights until boost() makes what the rank keeps,
  /// with exactly these values.
  explicit ViTForImageClassificationImpl(const ViTConfig& c, const parallel::ParallelContext& parallel = {});
  /// Logits [B, num_labels] for pixels [B, channels, H, W] (normalised floats).
  torch::Tensor forward(const torch::Tensor& pixels);

  /// Pipeline stages (the ParallelContext's pipeline layout): the rank builds only its chunks'
  /// layers, the embeddings if it holds virtual stage 0, the norm and classifier if it holds the
  /// last. forward_chunk runs chunk `chunk`: pixels or the previous stage's tokens [B, N, D] in,
  /// tokens or (last stage) logits out.
  torch::Tensor forward_chunk(int chunk, const torch::Tensor& input);
  /// The trainable parameters chunk `chunk` uses.
  std::vector<torch::Tensor> chunk_parameters(int chunk);
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  /// Mimetic initialisation of attention (Trockman & Kolter, 2023) for training from scratch:
  /// each head's W_q^T W_k is the best rank-(head dim) approximation of 0.7 Z + 0.7 I and each
  /// layer's W_o W_v is 0.4 Z - 0.4 I (Z Gaussian, variance 1/hidden), so attention starts out
  /// looking at nearby, similar tokens the way trained ViTs do. Each layer's draws come from
  /// generators seeded by init_seed() and the layer. Sets the parameters now, or (a lazily built
  /// model) says how boost() will.
  void mimetic_init();
  /// Position embeddings set to the 2-D sine-cosine table of the patch grid (a quarter of the
  /// channels each for sin and cos of the row and of the column, frequencies 1/10000^(i/(D/4)));
  /// the class token's entry zero. Still learned; neighbouring patches start out similar,
  /// which is what mimetic attention turns into local attention. Now, or at boost (lazily built).
  void sincos_position_init();
  /// Patch dropout in training: each image keeps this share of its patch tokens (drawn at
  /// random, the class token always kept), so a step costs about that share of the compute.
  /// Evaluation always sees every patch. 1: off.
  void set_patch_keep(double keep);
  const ViTConfig& config() const { return config_; }
  const parallel::ParallelContext& parallel_context() const { return parallel_; }
  ViTModel vit{nullptr};
  parallel::ParallelLinear classifier{nullptr};

  // nn::ParameterInitializer
  void init_parameter(const std::string& name, torch::Tensor& full) const override;
  uint64_t init_seed() const override { return init_seed_; }
  void set_init_seed(uint64_t seed) override { init_seed_ = seed; }

 private:
  /// Sets the parameters `which` selects (all when empty) from init_parameter, each rank its
  /// slice; deferred ones are left to boost().
  void reset_parameters(const std::function<bool(const std::string&)>& which = {});
  /// Mimetic weights of one layer: {query, key} or {output, value}, computed once per pair.
  const std::pair<torch::Tensor, torch::Tensor>& mimetic_pair(int64_t layer, bool query_key) const;

  ViTConfig config_;
  parallel::ParallelContext parallel_;
  uint64_t init_seed_ = 0;
  bool mimetic_ = false, sincos_ = false;
  mutable std::string mimetic_key_;  // the pair cached below (query and key are asked for in turn)
  mutable std::pair<torch::Tensor, torch::Tensor> mimetic_cache_;
  double patch_keep_ = 1.0;
  bool gradient_checkpointing_ = false;
  std::vector<std::pair<int64_t, int64_t>> chunk_layers_;  // [begin, end) per chunk of this rank
  std::pair<bool, bool> chunk_ends(int chunk) const;      // holds (embeddings, norm and classifier)
  torch::Tensor embed(const torch::Tensor& pixels);        // patches, class token, positions, patch dropout
};
TORCH_MODULE(ViTForImageClassification);

/// Class log-probabilities [B, num_labels] for pixels [B, C, H, W]. With `mirror`, each image's
/// probabilities are averaged with those of its left-right mirror image (test-time augmentation
/// for a model trained with random flips; one more forward pass). Runs in the model's current
/// mode; callers put it in eval mode.
torch::Tensor class_log_probs(ViTForImageClassification& model, const torch::Tensor& pixels, bool mirror);
/// log((exp(a) + exp(b)) / 2): the log of two predictions' mean probabilities.
torch::Tensor mean_log_probs(const torch::Tensor& a, const torch::Tensor& b);

/// What pipeline stages balance: each encoder layer's training FLOPs per image, the patch
/// embedding's (first stage) and the classifier's (last).
parallel::pipeline::StageCosts stage_costs(const ViTConfig& config);

/// ViT's rules for being split: heads and the MLP width by tp (on a 2D/2.5D/3D grid: heads by
/// the grid's side, widths by its weight blocks), layers by pp (at least one per
/// virtual stage); no sequence parallelism. Throws naming what does not divide (the model checks
/// it when built; apps check the job's layout before creating any group).
void check_parallel(const ViTConfig& config, int tp, parallel::SequenceParallelMode sp_mode,
                    dist::TensorParallelMode tp_mode = dist::TensorParallelMode::k1d, int tp_depth = 1);
void check_parallel(const ViTConfig& config, const dist::ParallelDims& dims);

/// How tensor parallelism splits the model (Megatron's layout): query/key/value and the MLP's
/// first layer by output features (heads stay whole on a rank), the attention output and the
/// MLP's second layer by input features; embeddings, norms and the small classifier replicated.
/// On a 2D/2.5D/3D grid the same rules cut blocks; the norms hold the stream's feature block, and
/// the embeddings and the classifier stay whole (the activations enter the grid after the
/// embeddings and leave it, gathered, before the classifier).
parallel::ParallelPlan parallel_plan(const ViTConfig& config);

}  // namespace colossal::vit
