#pragma once
// A LLaMA decoder in LibTorch with the Hugging Face parameter names:
//   model.embed_tokens.weight, model.layers.N.self_attn.{q,k,v,o}_proj.{weight,bias},
//   model.layers.N.self_attn.{q,k}_norm.weight (Qwen3),
//   model.layers.N.mlp.{gate,up,down}_proj.weight, model.layers.N.{input,post_attention}_layernorm.weight,
//   model.norm.weight, lm_head.weight
// and Mixtral (num_local_experts > 0) with model.layers.N.block_sparse_moe.* instead of mlp.* (llama/moe.h).
// RMSNorm, rotary position embeddings, grouped-query attention through LibTorch's
// scaled_dot_product_attention (causal), SwiGLU MLP. Every module that owns parameters runs
// through colossal::nn::call, so ZeRO-3 gathers it on demand.
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>

#include "core/checkpoint/safetensors.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/apply_plan.h"
#include "core/parallel/context.h"
#include "core/parallel/plan.h"
#include "core/parallel/tensor/parallel_embedding.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "llama/config.h"
#include "llama/moe.h"

namespace colossal::llama {

class RMSNormImpl : public torch::nn::Module, public parallel::ShardedModule {
 public:
  /// `per_head`: normalises each attention head of this rank (Qwen3's q/k norm): under tensor
  /// parallelism the heads are split, so its gradient is partial over the tensor group.
  /// `plus_one`: scales by (1 + weight), weights starting at 0 (Gemma). `layer_norm`: LayerNorm
  /// instead (mean-centred, with a bias; GPT-2).
  RMSNormImpl(int64_t dim, double eps, const parallel::ParallelContext& parallel = {}, bool per_head = false,
              bool plus_one = false, bool layer_norm = false);
  torch::Tensor forward(const torch::Tensor& x);
  /// Replicated; under split_gather (or per head under tp) it sees part of the input, so its
  /// gradient is partial.
  std::map<std::string, parallel::ShardSpec> shard_specs() const override;
  torch::Tensor weight, bias;  // bias: LayerNorm only

 private:
  double eps_;
  parallel::ParallelContext parallel_;
  bool per_head_, plus_one_;
};
TORCH_MODULE(RMSNorm);

/// GPT-2's learned absolute positions: [max_position_embeddings, hidden], replicated; under
/// split_gather each rank adds the rows of its own tokens, so the gradient is partial.
class LearnedPositionsImpl : public torch::nn::Module, public parallel::ShardedModule {
 public:
  LearnedPositionsImpl(int64_t positions, int64_t dim, const parallel::ParallelContext& parallel);
  torch::Tensor forward(const torch::Tensor& positions);
  std::map<std::string, parallel::ShardSpec> shard_specs() const override;
  torch::Tensor weight;

 private:
  parallel::ParallelContext parallel_;
};
TORCH_MODULE(LearnedPositions);

/// cos/sin tables for positions [0, max_positions), [max_positions, head_dim].
struct RotaryTables {
  torch::Tensor cos, sin;
  static RotaryTables make(const LlamaConfig& config, int64_t max_positions);
};

/// Where the tokens sit. `positions`: those of the tokens this rank computes q, k and v for ([T],
/// the whole sequence or this rank's shard under all_to_all and ring_attn; [B, T] in packed
/// batches, where they restart at 0 with each document). `visible`: packed batches only, [B, 1, T,
/// T] bool over the whole sequence attention reads, true where a query may see a key (the same
/// document, causal); undefined, attention is causal over the whole sequence.
struct TokenLayout {
  torch::Tensor positions;
  torch::Tensor visible;
};

/// Packed batches: [B, 1, T, T] true where key j is in query i's document and j <= i, the
/// documents read off `positions` [B, T] (each starts where its position is 0).
torch::Tensor document_causal_mask(const torch::Tensor& positions);

/// Where a layer sits (its module path) and how the model is parallelised: layers are built
/// through core's plan builder from LLaMA's plan (parallel_plan below).
using BuildContext = parallel::PlanBuilder;

class AttentionImpl : public torch::nn::Module {
 public:
  /// `layer`: the layer's index in the whole model (its window, Gemma 2's alternating layers).
  AttentionImpl(const LlamaConfig& config, const BuildContext& where, int64_t layer);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope, const TokenLayout& layout);
  parallel::ParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RMSNorm q_norm{nullptr}, k_norm{nullptr};  // Qwen3 (qk_norm): over each head, shared by all heads

 private:
  parallel::ParallelContext parallel_;
  int64_t heads_, kv_heads_, head_dim_;  // this rank's query and key/value heads
  int64_t kv_select_ = -1;               // kv heads kept whole: the one this rank's queries read
  int64_t window_ = 0;                   // sliding window (Mistral, Gemma 2's local layers); 0: full causal
  double scale_ = 0;                     // scores = q.k x scale_
  double softcap_ = 0;                   // Gemma 2: scores = cap x tanh(scores / cap); 0: none
  bool rotary_ = true;                   // false: GPT-2's learned positions are in the embeddings
};
TORCH_MODULE(Attention);

class MLPImpl : public torch::nn::Module {
 public:
  MLPImpl(const LlamaConfig& config, const BuildContext& where);
  torch::Tensor forward(const torch::Tensor& x);
  parallel::ParallelLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  parallel::ParallelContext parallel_;
  std::string act_;  // of the gate: silu (SwiGLU), gelu or gelu_pytorch_tanh (GeGLU)
};
TORCH_MODULE(MLP);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const LlamaConfig& config, const BuildContext& where, int64_t layer);
  /// A MoE layer adds its routing to `router` when given.
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope, const TokenLayout& layout,
                        parallel::expert::RouterLosses* router = nullptr);
  /// The two residual halves: x + attention(norm(x)), and h + feed-forward(norm(h)) (Gemma 2:
  /// each output normalised again before it is added).
  torch::Tensor attention_half(const torch::Tensor& x, const RotaryTables& rope, const TokenLayout& layout);
  torch::Tensor feed_forward_half(const torch::Tensor& h, parallel::expert::RouterLosses* router = nullptr);
  Attention self_attn{nullptr};
  MLP mlp{nullptr};                           // dense LLaMA
  SparseMoeBlock block_sparse_moe{nullptr};  // Mixtral (num_local_experts > 0)
  // post_attention_layernorm: the MLP's input norm, or (sandwich_norms) the attention output's
  // norm, with pre_/post_feedforward_layernorm around the MLP.
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RMSNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};
};
TORCH_MODULE(DecoderLayer);

class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const LlamaConfig& config, const BuildContext& where);
  parallel::ParallelEmbedding embed_tokens{nullptr};
  LearnedPositions embed_positions{nullptr};  // GPT-2 (learned_positions), with the embedding
  std::vector<DecoderLayer> layers;  // the layers this rank holds, registered as layers.N.*
  std::vector<int64_t> layer_ids;    // their indices in the whole model (N)
  RMSNorm norm{nullptr};             // null on a pipeline stage without the head
                                     // (embed_tokens: null on one without the embedding)
};
TORCH_MODULE(Decoder);

class LlamaForCausalLMImpl : public torch::nn::Module, public nn::ParameterInitializer {
 public:
  /// Built under nn::DeferredInitGuard, no weight is materialised (boost() does it, keeping only
  /// what the rank holds); otherwise initialised at once (reset_parameters).
  explicit LlamaForCausalLMImpl(const LlamaConfig& config, const parallel::ParallelContext& parallel = {});
  /// Logits [batch, seq, vocab] for token ids [batch, seq] (gathered whole under tensor and
  /// sequence parallelism). Every rank passes the whole batch; sequence parallelism takes each
  /// rank's share of it inside. `positions` [batch, seq]: a packed batch, several documents per
  /// row, each attending only to itself, its positions restarting at 0 (see TokenLayout); not
  /// under ring_attn or pipeline parallelism. Undefined: one sequence per row.
  torch::Tensor forward(const torch::Tensor& input_ids, const torch::Tensor& positions = {});
  /// Mean next-token cross entropy (labels = input_ids shifted; -100 is ignored). Under
  /// all_to_all and ring_attn each rank's gradients cover its own tokens: summed over the
  /// sequence-parallel group they are the gradient of the mean (the hybrid plugin sums them).
  torch::Tensor loss(const torch::Tensor& input_ids, const torch::Tensor& labels, const torch::Tensor& positions = {});
  /// log p(labels[t + 1] | tokens up to t) at each position t this rank scores: [batch, seq] fp32
  /// ([batch, seq / sp] at this rank's positions under all_to_all and ring_attn), 0 where the label
  /// is -100 and at the last position. The head is fused in (nn::linear_token_log_probs) where
  /// this rank holds it whole on the CPU; under tensor parallelism it reads the gathered logits.
  /// Not under pipeline parallelism (a sequence's log-likelihood needs the head's stage).
  torch::Tensor token_log_probs(const torch::Tensor& input_ids, const torch::Tensor& labels,
                                const torch::Tensor& positions = {});
  /// Reward model (transformers' *ForSequenceClassification with one label): registers "score",
  /// a [1, hidden] linear layer without bias on the final norm's output (normal(0,
  /// initializer_range) from `seed`, the same on every rank), and freezes an untied lm_head, which
  /// a reward model does not use. Before boost().
  void add_score_head(uint64_t seed);
  /// The score head's value at position last[b] of each sequence b: [batch] fp32, the same on
  /// every rank (under all_to_all and ring_attn the rank holding the position contributes it).
  torch::Tensor sequence_scores(const torch::Tensor& input_ids, const torch::Tensor& last);
  /// Per-token values of this rank's positions summed over each sequence: [batch], the same on
  /// every rank of a sequence-parallel group (summed over it; each rank's gradient flows to its own
  /// positions, as loss()'s does).
  torch::Tensor sum_over_sequence(const torch::Tensor& per_token);

  // ---- pipeline stages (ParallelContext::pipeline): a rank builds only its model chunks ----
  /// Runs this rank's model chunk `chunk`: token ids in on the chunk holding the embedding,
  /// hidden states otherwise; this rank's logits out of the chunk holding the head, hidden states
  /// otherwise. Without a pipeline, chunk 0 is the whole model.
  torch::Tensor forward_chunk(int chunk, const torch::Tensor& input);
  /// loss() from forward_chunk's logits (the last stage's part of the loss). A MoE model in
  /// training adds router_aux_loss_coef x the load-balancing loss and router_z_loss_coef x the
  /// z-loss of the forward that made the logits (as MixtralForCausalLM with output_router_logits).
  torch::Tensor loss_from_logits(const torch::Tensor& logits, const torch::Tensor& labels);
  /// A MoE model: the routing of the last forward (tokens per expert, the auxiliary losses).
  const parallel::expert::RouterLosses& router_losses() const { return router_losses_; }
  /// The trainable parameters of chunk `chunk` (for the zero-bubble schedules' W step).
  std::vector<torch::Tensor> chunk_parameters(int chunk);
  /// Normal(0, initializer_range) weights, unit norms (training from scratch), each parameter
  /// drawn from its own generator (seeded by init_seed() and its name: init_parameter). Split
  /// parameters are drawn whole and sliced, so every tensor-parallel size, every ZeRO-3 shard
  /// and a lazily built model start from the same values.
  void reset_parameters();
  /// nn::ParameterInitializer: the full value of parameter `name`.
  void init_parameter(const std::string& name, torch::Tensor& full) const override;
  /// Drawn from LibTorch's generator when the model is constructed (torch::manual_seed before
  /// building fixes it).
  uint64_t init_seed() const override { return init_seed_; }
  void set_init_seed(uint64_t seed) override { init_seed_ = seed; }
  /// Initial values read from a checkpoint instead of drawn (load_pretrained's lazy mode): each
  /// deferred parameter is read when boost() materialises it, straight into the rank's shard or
  /// slice. Dropped once every parameter has its values.
  void set_weights_source(std::shared_ptr<const checkpoint::CheckpointReader> reader) { weights_ = std::move(reader); }
  void parameters_materialized() override { weights_.reset(); }
  const parallel::ParallelContext& parallel_context() const { return parallel_; }
  /// Whether checkpoint tensor `name` belongs to an expert another ep rank holds.
  bool expert_held_elsewhere(const std::string& name) const;
  const LlamaConfig& config() const { return config_; }
  /// Per-layer activation checkpointing: each decoder layer keeps only its input in forward and
  /// runs again in backward (see core/nn/activation_checkpoint.h).
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  /// NEFTune: in training, noise of magnitude `alpha` added to the embeddings (nn::neftune_noise),
  /// drawn from `seed` and a count of forwards, so every rank of a tensor- or sequence-parallel
  /// group draws the same noise for the same tokens. 0: off.
  void set_neftune(double alpha, uint64_t seed);
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  Decoder model{nullptr};
  parallel::ParallelLinear lm_head{nullptr};  // null when tie_word_embeddings
  torch::nn::Linear score{nullptr};           // reward models only (add_score_head)

 private:
  const RotaryTables& rope_for(int64_t seq_len, const c10::Device& device);
  const RotaryTables& host_rope_for(int64_t seq_len);
  /// This rank's logits (its vocabulary slice under tensor parallelism, padded columns -inf;
  /// its tokens under all_to_all and ring_attn).
  torch::Tensor local_logits(const torch::Tensor& input_ids, const torch::Tensor& positions = {});
  /// forward_chunk, or (to_hidden) up to the head's input: the final norm's output. `packed`:
  /// forward()'s positions.
  torch::Tensor run_chunk(int chunk, const torch::Tensor& input, bool to_hidden, const torch::Tensor& packed = {});
  /// Where the tokens of a [B, T] sequence sit, as attention reads them.
  TokenLayout token_layout(int64_t T, const torch::Tensor& packed, const c10::Device& device) const;
  /// The sequence indices of the hidden states a first stage embeds: all T, this rank's shard
  /// under all_to_all and ring_attn, its tp slice under split_gather.
  torch::Tensor embedded_indices(int64_t seq_len) const;
  /// labels shifted left by one (position t predicts labels[t + 1]), -100 past the end; this
  /// rank's tokens under all_to_all and ring_attn.
  torch::Tensor next_token_targets(const torch::Tensor& labels) const;
  /// The mean loss of this rank's tokens, plus the MoE auxiliary losses, made the mean over the
  /// sequence-parallel group's tokens (loss_from_logits' and loss()'s common end).
  torch::Tensor finish_loss(torch::Tensor mean, const torch::Tensor& flat_target, const torch::Tensor& anchor);
  /// Whether model chunk `chunk` holds the embedding (first) and the head (last).
  std::pair<bool, bool> chunk_ends(int chunk) const;
  /// all_to_all and ring_attn: each rank embeds, normalises and predicts only its own tokens.
  bool holds_sequence_shard() const;
  /// A MoE model under pipeline parallelism: stage outputs carry the routing statistics as one
  /// extra sequence row (forward_chunk).
  bool carries_router_row() const;

  LlamaConfig config_;
  parallel::ParallelContext parallel_;
  uint64_t init_seed_ = 0;
  std::shared_ptr<const checkpoint::CheckpointReader> weights_;  // lazy load_pretrained
  /// The global positions of the hidden states a first stage embeds (its shard's under
  /// split_gather, which the embedding's reduce-scatter leaves on each rank).
  torch::Tensor embedded_positions(const torch::Tensor& positions, int64_t seq_len) const;
  RotaryTables rope_;       // positions [0, max_position_embeddings)
  RotaryTables long_rope_;  // dynamic scaling: the last longer length seen
  RotaryTables rope_on_device_;  // the tables in use, on the GPU the model runs on
  const void* rope_on_device_source_ = nullptr;
  bool gradient_checkpointing_ = false;
  double neftune_alpha_ = 0;
  uint64_t neftune_seed_ = 0, neftune_draws_ = 0;
  std::vector<std::pair<int64_t, int64_t>> chunk_layers_;  // [begin, end) layers of each chunk
  parallel::expert::RouterLosses router_losses_;            // MoE: the last forward's routing (pooled
                                                            // with earlier stages' under pp)
};
TORCH_MODULE(LlamaForCausalLM);

/// How tensor parallelism splits LLaMA: q/k/v and gate/up column-parallel, o and down
/// row-parallel, the embedding vocab-parallel, lm_head vocab-parallel into the parallel cross
/// entropy (a tied model's output layer follows the embedding); norms replicated.
parallel::ParallelPlan parallel_plan(const LlamaConfig& config);

}  // namespace colossal::llama
