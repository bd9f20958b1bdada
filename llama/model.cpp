#include "llama/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>

#include "core/nn/activation_checkpoint.h"
#include "core/nn/fused_losses.h"
#include "core/nn/module_hooks.h"
#include "core/nn/neftune.h"
#include "core/nn/rms_norm.h"
#include "core/nn/rotary.h"
#include "core/nn/swiglu.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/sequence/layout.h"
#include "core/parallel/sequence/ring_attention.h"
#include "core/parallel/sequence/sequence_ops.h"
#include "core/parallel/tensor/comm_ops.h"
#include "core/parallel/tensor/grid/grid_layers.h"
#include "core/parallel/tensor/layers.h"
#include "core/tools/memory_tracer.h"
#include "llama/parallelize.h"
#include "llama/shapes.h"

namespace colossal::llama {

using nn::call;

RMSNormImpl::RMSNormImpl(int64_t dim, double eps, const parallel::ParallelContext& parallel, bool per_head,
                         bool plus_one, bool layer_norm)
    : eps_(eps), parallel_(parallel), per_head_(per_head), plus_one_(plus_one) {
  // On a 2D/2.5D/3D grid the residual stream's features are split: each rank holds its block.
  if (parallel.grid_parallel() && !per_head) {
    const int parts = parallel.grid.stream().feature_parts();
    COLOSSAL_CHECK(dim % parts == 0, "[llama] tp_mode ", dist::to_string(parallel.grid.mode()), ": hidden size ", dim,
                   " does not divide into the grid's ", parts, " feature blocks");
    dim /= parts;
  }
  weight = register_parameter("weight", nn::deferred_init_enabled() ? nn::deferred_empty({dim})
                                        : plus_one ? torch::zeros({dim}) : torch::ones({dim}));
  if (layer_norm)
    bias = register_parameter("bias", nn::deferred_init_enabled() ? nn::deferred_empty({dim}) : torch::zeros({dim}));
}

std::map<std::string, parallel::ShardSpec> RMSNormImpl::shard_specs() const {
  if (parallel_.grid_parallel()) {
    const auto& grid = parallel_.grid;
    parallel::ShardSpec s;
    if (per_head_) {  // whole on every rank; each normalises its own heads of its own rows
      s.group = grid.group();
      s.gradient_partial = true;
    } else {
      s = parallel::grid_shard_spec(grid.feature_block(grid.stream()), {weight.size(0) * grid.stream().feature_parts()});
    }
    if (bias.defined()) return {{"weight", s}, {"bias", s}};
    return {{"weight", s}};
  }
  const bool partial = per_head_ ? parallel_.tp_size() > 1 : parallel::splits_sequence_over_tp(parallel_);
  if (!partial) return {};
  parallel::ShardSpec s;
  s.group = parallel_.tp;
  s.gradient_partial = true;
  if (bias.defined()) return {{"weight", s}, {"bias", s}};
  return {{"weight", s}};
}

LearnedPositionsImpl::LearnedPositionsImpl(int64_t positions, int64_t dim, const parallel::ParallelContext& parallel)
    : parallel_(parallel) {
  if (parallel.grid_parallel()) dim /= parallel.grid.stream().feature_parts();  // the stream's feature block
  weight = register_parameter("weight", nn::deferred_init_enabled() ? nn::deferred_empty({positions, dim})
                                                                    : torch::zeros({positions, dim}));
}

torch::Tensor LearnedPositionsImpl::forward(const torch::Tensor& positions) {
  if (parallel_.grid_parallel()) return parallel::grid_embedding(positions, weight, parallel_.grid.stream());
  return torch::embedding(weight, positions);
}

std::map<std::string, parallel::ShardSpec> LearnedPositionsImpl::shard_specs() const {
  if (parallel_.grid_parallel()) {
    const auto& grid = parallel_.grid;
    return {{"weight", parallel::grid_shard_spec(grid.hidden_embedding_block(),
                                                 {weight.size(0), weight.size(1) * grid.stream().feature_parts()})}};
  }
  if (!parallel::splits_sequence_over_tp(parallel_)) return {};
  parallel::ShardSpec s;
  s.group = parallel_.tp;
  s.gradient_partial = true;
  return {{"weight", s}};
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  if (parallel_.grid_parallel() && !per_head_) {
    // The statistics over the feature blocks of the grid (grid_layers.h); fp32 as below.
    const auto& stream = parallel_.grid.stream();
    if (bias.defined())
      return parallel::grid_layer_norm(x.to(torch::kFloat), weight.to(torch::kFloat), bias.to(torch::kFloat), eps_,
                                       stream)
          .to(x.scalar_type());
    return parallel::grid_rms_norm(x, plus_one_ ? weight.to(torch::kFloat) + 1.0 : weight, eps_, stream);
  }
  if (bias.defined()) {  // LayerNorm, in fp32 whatever the compute dtype
    return torch::layer_norm(x.to(torch::kFloat), {x.size(-1)}, weight.to(torch::kFloat), bias.to(torch::kFloat), eps_)
        .to(x.scalar_type());
  }
  // In fp32 whatever the compute dtype, as Hugging Face does (fused when everything is fp32).
  if (!plus_one_) return nn::rms_norm(x, weight, eps_);
  // Gemma: (1 + w) formed in fp32 and applied before the cast back, as transformers' GemmaRMSNorm.
  if (x.scalar_type() == torch::kFloat) return nn::rms_norm(x, weight.to(torch::kFloat) + 1.0, eps_);
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return (h * (weight.to(torch::kFloat) + 1.0)).to(x.scalar_type());
}

RotaryTables RotaryTables::make(const LlamaConfig& c, int64_t max_positions) {
  auto freqs_vec = c.rope_inv_freq(max_positions);
  auto inv_freq = torch::tensor(freqs_vec, torch::kFloat64);
  auto t = torch::arange(max_positions, torch::kFloat64);
  auto freqs = torch::outer(t, inv_freq);
  auto emb = torch::cat({freqs, freqs}, -1);
  return {emb.cos().to(torch::kFloat32), emb.sin().to(torch::kFloat32)};
}

namespace {

parallel::ParallelLinear linear(const BuildContext& where, int64_t in, int64_t out, bool bias, int64_t kv_heads = 0) {
  return where.linear(in, out, bias, kv_heads);
}

// Position t predicts labels[t + 1]; the last position predicts nothing. Shifting the labels
// rather than slicing the logits keeps backward from building a zero-filled copy of the whole
// logits tensor.
torch::Tensor shifted_targets(const torch::Tensor& labels) {
  auto target = torch::full_like(labels, -100);
  const int64_t T = labels.size(1);
  target.narrow(1, 0, T - 1).copy_(labels.narrow(1, 1, T - 1));
  return target;
}

// cap x tanh(x / cap), keeping -inf (masked or padded) entries as they are.
torch::Tensor soft_cap(const torch::Tensor& x, double cap) {
  auto capped = torch::tanh(x / cap) * cap;
  return torch::where(x.isneginf(), x, capped);
}

// Attention with Gemma 2's soft-capped scores, spelled out (SDPA has no hook between the
// product and the softmax). q [B, H, T, D], k and v [B, H_kv, T, D]; the softmax in fp32.
torch::Tensor soft_capped_attention(const torch::Tensor& q, torch::Tensor k, torch::Tensor v, double scale, double cap,
                                    const std::optional<torch::Tensor>& mask) {
  const int64_t groups = q.size(1) / k.size(1), T = q.size(2);
  if (groups > 1) {
    k = k.repeat_interleave(groups, 1);
    v = v.repeat_interleave(groups, 1);
  }
  auto scores = torch::matmul(q.to(torch::kFloat), k.to(torch::kFloat).transpose(-1, -2)) * scale;
  scores = torch::tanh(scores / cap) * cap;
  auto visible = mask ? *mask : torch::ones({T, T}, q.options().dtype(torch::kBool)).tril();
  scores = scores.masked_fill(visible.logical_not(), -std::numeric_limits<float>::infinity());
  return torch::matmul(torch::softmax(scores, -1), v.to(torch::kFloat)).to(q.scalar_type());
}

}  // namespace

torch::Tensor document_causal_mask(const torch::Tensor& positions) {
  COLOSSAL_CHECK(positions.dim() == 2, "[llama] packed positions: expected [batch, seq], got ", positions.sizes());
  const int64_t T = positions.size(1);
  auto document = positions.eq(0).cumsum(1);  // [B, T]: each document starts at position 0
  auto same = document.unsqueeze(2).eq(document.unsqueeze(1));
  auto causal = torch::ones({T, T}, positions.options().dtype(torch::kBool)).tril();
  return same.logical_and(causal).unsqueeze(1);
}

AttentionImpl::AttentionImpl(const LlamaConfig& c, const BuildContext& where, int64_t layer)
    : parallel_(where.parallel), head_dim_(c.resolved_head_dim()), window_(c.layer_window(layer)),
      scale_(c.attention_scale()), softcap_(c.attn_logit_softcapping), rotary_(!c.learned_positions) {
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads;
  const int tp = parallel_.tp_size();
  const bool qkv_bias = c.q_k_v_bias();
  q_proj = register_module("q_proj", linear(where.at("q_proj"), c.hidden_size, heads * head_dim_, qkv_bias));
  k_proj = register_module("k_proj", linear(where.at("k_proj"), c.hidden_size, kv * head_dim_, qkv_bias, kv));
  v_proj = register_module("v_proj", linear(where.at("v_proj"), c.hidden_size, kv * head_dim_, qkv_bias, kv));
  o_proj = register_module("o_proj", linear(where.at("o_proj"), heads * head_dim_, c.hidden_size, c.attention_bias));
  if (c.qk_norm) {
    // Whole on every rank (one head_dim vector shared by the heads); under tp each rank
    // normalises its own heads, so the gradient is summed over the tensor group.
    q_norm = register_module("q_norm", RMSNorm(head_dim_, c.rms_norm_eps, parallel_, /*per_head=*/true,
                                               c.norm_plus_one));
    k_norm = register_module("k_norm", RMSNorm(head_dim_, c.rms_norm_eps, parallel_, /*per_head=*/true,
                                               c.norm_plus_one));
  }
  heads_ = q_proj->local_out_features() / head_dim_;
  kv_heads_ = k_proj->local_out_features() / head_dim_;
  if (tp > 1 && kv_heads_ == kv && kv < tp) {
    // Whole kv heads on every rank: this rank's query heads all read one of them.
    kv_select_ = parallel_.tp_rank() * heads_ / (heads / kv);
    kv_heads_ = 1;
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x_in, const RotaryTables& rope,
                                     const TokenLayout& layout) {
  using Mode = parallel::SequenceParallelMode;
  // One gradient all-reduce for q, k and v (split_gather: the sequence is gathered here).
  auto x = parallel::enter_tensor_parallel(x_in, parallel_);
  const int64_t B = x.size(0), T = x.size(1);
  auto q = call(q_proj, x).view({B, T, heads_, head_dim_});
  auto k = call(k_proj, x), v = call(v_proj, x);
  if (kv_select_ >= 0) {
    k = k.narrow(-1, kv_select_ * head_dim_, head_dim_);
    v = v.narrow(-1, kv_select_ * head_dim_, head_dim_);
  }
  k = k.view({B, T, kv_heads_, head_dim_});
  v = v.view({B, T, kv_heads_, head_dim_});
  if (q_norm) {
    q = call(q_norm, q);
    k = call(k_norm, k);
  }
  // Rotary embeddings at the tokens' own positions, before any exchange (GPT-2 added its learned
  // positions to the embeddings instead).
  if (rotary_) {
    q = nn::apply_rotary(q, rope.cos, rope.sin, layout.positions);
    k = nn::apply_rotary(k, rope.cos, rope.sin, layout.positions);
  }
  torch::Tensor out;  // [B, T, heads_, head_dim_]
  if (parallel_.sp_mode == Mode::kRingAttn && parallel_.sp_size() > 1) {
    COLOSSAL_CHECK(!layout.visible.defined(), "[llama] packed sequences under ring_attn are not supported (the ring "
                   "passes whole blocks, not documents); use --sp_mode all_to_all or split_gather");
    COLOSSAL_CHECK(softcap_ == 0, "[llama] attn_logit_softcapping ", softcap_, " under ring_attn is not implemented; "
                   "use --sp_mode all_to_all or split_gather");
    out = parallel::ring_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), parallel_.sp, window_,
                                   scale_)
              .transpose(1, 2);
  } else {
    if (parallel_.sp_mode == Mode::kAllToAll && parallel_.sp_size() > 1) {
      // Ulysses: trade the sequence shard for a share of the heads, attend over the whole
      // sequence, trade back. Too few kv heads to share out: each query head gets its own copy.
      if (kv_heads_ % parallel_.sp_size() != 0) {
        k = k.repeat_interleave(heads_ / kv_heads_, 2);
        v = v.repeat_interleave(heads_ / kv_heads_, 2);
      }
      q = parallel::sequence_to_heads(q, parallel_.sp);
      k = parallel::sequence_to_heads(k, parallel_.sp);
      v = parallel::sequence_to_heads(v, parallel_.sp);
    }
    // A sliding window shorter than the sequence: causal and within the window, as a mask; a
    // packed batch: within each document.
    const int64_t len = q.size(1);
    std::optional<torch::Tensor> mask;
    if (window_ > 0 && len > window_) mask = parallel::sliding_window_mask(len, window_, q.device());
    if (layout.visible.defined()) {
      COLOSSAL_CHECK(layout.visible.size(-1) == len, "[llama] packed document mask over ", layout.visible.size(-1),
                     " tokens, attention reads ", len);
      mask = mask ? layout.visible.logical_and(*mask) : layout.visible;
    }
    if (softcap_ > 0) {
      out = soft_capped_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), scale_, softcap_, mask)
                .transpose(1, 2);
    } else {
      out = at::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), mask,
                                             /*dropout_p=*/0.0, /*is_causal=*/!mask.has_value(), scale_,
                                             /*enable_gqa=*/k.size(2) != q.size(2))
                .transpose(1, 2);
    }
    if (parallel_.sp_mode == Mode::kAllToAll) out = parallel::heads_to_sequence(out, parallel_.sp);
  }
  return call(o_proj, out.reshape({B, T, heads_ * head_dim_}));
}

MLPImpl::MLPImpl(const LlamaConfig& c, const BuildContext& where) : parallel_(where.parallel), act_(c.hidden_act) {
  if (c.gated_mlp)
    gate_proj = register_module("gate_proj", linear(where.at("gate_proj"), c.hidden_size, c.intermediate_size, false));
  up_proj = register_module("up_proj", linear(where.at("up_proj"), c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj =
      register_module("down_proj", linear(where.at("down_proj"), c.intermediate_size, c.hidden_size, c.mlp_bias));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x_in) {
  auto x = parallel::enter_tensor_parallel(x_in, parallel_);
  const char* approximate = act_ == "gelu_pytorch_tanh" ? "tanh" : "none";
  if (!gate_proj) return call(down_proj, torch::gelu(call(up_proj, x), approximate));  // GPT-2: no gate
  if (act_ == "silu") return call(down_proj, nn::swiglu(call(gate_proj, x), call(up_proj, x)));
  return call(down_proj, torch::gelu(call(gate_proj, x), approximate) * call(up_proj, x));
}

DecoderLayerImpl::DecoderLayerImpl(const LlamaConfig& c, const BuildContext& where, int64_t layer) {
  self_attn = register_module("self_attn", Attention(c, where.at("self_attn"), layer));
  if (c.is_moe())
    block_sparse_moe = register_module("block_sparse_moe", SparseMoeBlock(c, where.at("block_sparse_moe")));
  else
    mlp = register_module("mlp", MLP(c, where.at("mlp")));
  auto norm = [&](const char* name) {
    return register_module(name, RMSNorm(c.hidden_size, c.rms_norm_eps, where.parallel, false, c.norm_plus_one,
                                         c.layer_norm));
  };
  input_layernorm = norm("input_layernorm");
  post_attention_layernorm = norm("post_attention_layernorm");
  if (c.sandwich_norms) {
    pre_feedforward_layernorm = norm("pre_feedforward_layernorm");
    post_feedforward_layernorm = norm("post_feedforward_layernorm");
  }
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryTables& rope,
                                        const TokenLayout& layout, parallel::expert::RouterLosses* router) {
  return feed_forward_half(attention_half(x, rope, layout), router);
}

torch::Tensor DecoderLayerImpl::attention_half(const torch::Tensor& x, const RotaryTables& rope,
                                               const TokenLayout& layout) {
  auto out = self_attn->forward(call(input_layernorm, x), rope, layout);
  if (pre_feedforward_layernorm) out = call(post_attention_layernorm, out);
  return x + out;
}

torch::Tensor DecoderLayerImpl::feed_forward_half(const torch::Tensor& h, parallel::expert::RouterLosses* router) {
  auto normed = call(pre_feedforward_layernorm ? pre_feedforward_layernorm : post_attention_layernorm, h);
  auto out = block_sparse_moe ? block_sparse_moe->forward(normed, router) : mlp->forward(normed);
  if (post_feedforward_layernorm) out = call(post_feedforward_layernorm, out);
  return h + out;
}

DecoderImpl::DecoderImpl(const LlamaConfig& c, const BuildContext& where) {
  // A pipeline stage builds only its own layers, under their global names (layers.N.*), so its
  // checkpoints are pieces of the one Hugging Face layout.
  const auto& pipe = where.parallel.pipeline;
  if (!pipe.enabled() || pipe.holds_first()) {
    embed_tokens = register_module("embed_tokens", where.at("embed_tokens").embedding(c.vocab_size, c.hidden_size));
    if (c.learned_positions)
      embed_positions = register_module("embed_positions",
                                        LearnedPositions(c.max_position_embeddings, c.hidden_size, where.parallel));
  }
  auto stack = register_module("layers", std::make_shared<torch::nn::Module>("LayerStack"));
  std::vector<int64_t> held;
  for (const auto& [begin, end] : pipe.layer_ranges(c.num_hidden_layers, stage_costs(c, c.max_position_embeddings)))
    for (int64_t i = begin; i < end; ++i) held.push_back(i);
  std::sort(held.begin(), held.end());
  for (int64_t i : held) {
    layers.push_back(DecoderLayer(c, where.at("layers." + std::to_string(i)), i));
    layer_ids.push_back(i);
    stack->register_module(std::to_string(i), layers.back());
  }
  if (!pipe.enabled() || pipe.holds_last())
    norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps, where.parallel, false, c.norm_plus_one,
                                           c.layer_norm));
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& config, const parallel::ParallelContext& parallel)
    : config_(config), parallel_(parallel) {
  // First, before any layer draws: eager and deferred construction take the same seed.
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    init_seed_ = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  config_.validate();
  check_parallel(config_, {parallel_.grid_parallel() ? parallel_.grid.size() : parallel_.tp_size(), parallel_.sp_size(),
                           parallel_.sp_mode, parallel_.ep_size(),
                           parallel_.pipeline.enabled() ? parallel_.pipeline.schedule.stages : 1, parallel_.grid.mode(),
                           parallel_.grid.mode() == dist::TensorParallelMode::k2p5d ? parallel_.grid.depth() : 1});
  const auto plan = parallel_plan(config_);
  const BuildContext root{plan, parallel_, ""};
  model = register_module("model", Decoder(config_, root.at("model")));
  // Tied: no lm_head module; the output layer multiplies by the embedding matrix (saved once,
  // as Hugging Face does for tied weights).
  const auto& pipe = parallel_.pipeline;
  COLOSSAL_CHECK(!config_.tie_word_embeddings || !pipe.enabled() || pipe.holds_first() == pipe.holds_last(),
                 "[llama] tie_word_embeddings with pp ", pipe.schedule.stages, ": the tied head reads the embedding, "
                 "so the first and last virtual stages must share a rank (--pp_schedule zbv does), or untie them");
  if (!config_.tie_word_embeddings && (!pipe.enabled() || pipe.holds_last()))
    lm_head = register_module("lm_head", linear(root.at("lm_head"), config_.hidden_size, config_.vocab_size, false));
  chunk_layers_ = pipe.layer_ranges(config_.num_hidden_layers, stage_costs(config_, config_.max_position_embeddings));
  rope_ = RotaryTables::make(config_, config_.max_position_embeddings);
  if (!nn::deferred_init_enabled()) reset_parameters();
}

void LlamaForCausalLMImpl::init_parameter(const std::string& name, torch::Tensor& full) const {
  torch::NoGradGuard no_grad;
  if (weights_) {  // checked against the model's full shapes when the source was attached
    full.copy_(weights_->view(name));
    return;
  }
  if (full.dim() == 1) {
    const bool norm_weight = name.find("norm") != std::string::npos && name.size() > 7 &&
                             name.compare(name.size() - 7, 7, ".weight") == 0;
    if (norm_weight) full.fill_(config_.norm_plus_one ? 0.0 : 1.0);
    else full.zero_();
    return;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(nn::parameter_seed(init_seed_, name));
  full.normal_(0.0, config_.initializer_range, gen);
}

void LlamaForCausalLMImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const auto specs = parallel::collect_shard_specs(*this);
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    const auto* split = parallel::split_spec(specs, item.key());
    auto full = torch::empty(parallel::full_shape(p, split), torch::kFloat32);
    init_parameter(item.key(), full);
    p.copy_(parallel::local_part(full, split, p));  // padded vocabulary rows stay zero
  }
}

bool LlamaForCausalLMImpl::expert_held_elsewhere(const std::string& name) const {
  static const std::string kExperts = ".block_sparse_moe.experts.";
  const auto at = name.find(kExperts);
  if (!config_.is_moe() || at == std::string::npos) return false;
  const parallel::expert::ExpertPlacement placement{config_.num_local_experts, parallel_.ep};
  try {
    return !placement.holds(std::stoll(name.substr(at + kExperts.size())));
  } catch (const std::exception&) {
    return false;  // not an expert index: the load names it as unexpected
  }
}

const RotaryTables& LlamaForCausalLMImpl::rope_for(int64_t seq_len, const c10::Device& device) {
  const RotaryTables& host = host_rope_for(seq_len);
  if (device.is_cpu()) return host;
  // Kept on the device once (the tables are built on the host; the model's own buffers move
  // with model->to(), these plain members do not).
  if (!rope_on_device_.cos.defined() || rope_on_device_.cos.device() != device ||
      rope_on_device_.cos.size(0) != host.cos.size(0) || rope_on_device_source_ != host.cos.unsafeGetTensorImpl()) {
    rope_on_device_ = {host.cos.to(device), host.sin.to(device)};
    rope_on_device_source_ = host.cos.unsafeGetTensorImpl();
  }
  return rope_on_device_;
}

const RotaryTables& LlamaForCausalLMImpl::host_rope_for(int64_t seq_len) {
  if (seq_len <= rope_.cos.size(0)) return rope_;
  // Dynamic (NTK) scaling is defined past the trained length: the rotary base grows with the
  // sequence, so tables are rebuilt for it (and kept for the next call of the same length).
  TORCH_CHECK(config_.rope_scaling.type == "dynamic", "[llama] sequence of ", seq_len,
              " tokens exceeds max_position_embeddings ", config_.max_position_embeddings,
              " (only rope_scaling 'dynamic' extends past it)");
  if (!long_rope_.cos.defined() || long_rope_.cos.size(0) != seq_len) long_rope_ = RotaryTables::make(config_, seq_len);
  return long_rope_;
}

torch::Tensor LlamaForCausalLMImpl::embedded_indices(int64_t seq_len) const {
  if (holds_sequence_shard()) return parallel::local_positions(seq_len, parallel_);
  if (!parallel::splits_sequence_over_tp(parallel_)) return torch::arange(seq_len);
  return parallel::sequence_positions(seq_len, parallel::SequenceParallelMode::kSplitGather, parallel_.tp_rank(),
                                      parallel_.tp_size());
}

torch::Tensor LlamaForCausalLMImpl::embedded_positions(const torch::Tensor& positions, int64_t seq_len) const {
  COLOSSAL_CHECK(seq_len <= config_.max_position_embeddings, "[llama] sequence of ", seq_len,
                 " tokens exceeds the ", config_.max_position_embeddings, " learned positions (n_positions)");
  if (!parallel::splits_sequence_over_tp(parallel_)) return positions;
  auto held = embedded_indices(seq_len).to(positions.device());
  return positions.dim() == 2 ? positions.index_select(1, held) : held;
}

TokenLayout LlamaForCausalLMImpl::token_layout(int64_t T, const torch::Tensor& packed, const c10::Device& device) const {
  TokenLayout layout;
  if (!packed.defined()) {
    // Attention sees the whole sequence (gathered under split_gather) or this rank's share.
    layout.positions = (holds_sequence_shard() ? parallel::local_positions(T, parallel_) : torch::arange(T)).to(device);
    return layout;
  }
  COLOSSAL_CHECK(!parallel_.pipeline.enabled(), "[llama] packed sequences under pipeline parallelism are not "
                 "supported yet; use data, tensor or sequence parallelism");
  COLOSSAL_CHECK(packed.dim() == 2 && packed.size(1) == T, "[llama] packed positions ", packed.sizes(),
                 " do not match the sequence of ", T, " tokens");
  auto whole = packed.to(device, torch::kLong);
  layout.positions = holds_sequence_shard() ? parallel::take_local(whole, parallel_) : whole;
  layout.visible = document_causal_mask(whole);
  return layout;
}

void LlamaForCausalLMImpl::set_neftune(double alpha, uint64_t seed) {
  COLOSSAL_CHECK(alpha >= 0, "[llama] neftune alpha must be >= 0, got ", alpha);
  neftune_alpha_ = alpha;
  neftune_seed_ = seed;
  neftune_draws_ = 0;
}

bool LlamaForCausalLMImpl::holds_sequence_shard() const {
  return parallel_.sp_mode != parallel::SequenceParallelMode::kSplitGather && parallel::shards_sequence(parallel_);
}

torch::Tensor LlamaForCausalLMImpl::local_logits(const torch::Tensor& input_ids, const torch::Tensor& positions) {
  COLOSSAL_CHECK(!parallel_.pipeline.enabled(), "[llama] this rank holds one pipeline stage: run it through the "
                 "pipeline (forward_chunk), not as a whole model");
  return run_chunk(0, input_ids, /*to_hidden=*/false, positions);
}

torch::Tensor LlamaForCausalLMImpl::forward_chunk(int chunk, const torch::Tensor& input) {
  return run_chunk(chunk, input, /*to_hidden=*/false);
}

torch::Tensor LlamaForCausalLMImpl::run_chunk(int chunk, const torch::Tensor& input, bool to_hidden,
                                              const torch::Tensor& packed) {
  COLOSSAL_CHECK(chunk >= 0 && chunk < static_cast<int>(chunk_layers_.size()), "[llama] model chunk ", chunk,
                 ": this rank holds ", chunk_layers_.size());
  const auto [first, last] = chunk_ends(chunk);
  // A MoE model's pipeline stages pass the routing statistics so far as one extra sequence row
  // behind the hidden states (see carries_router_row).
  router_losses_.clear();  // this forward's routing
  torch::Tensor hidden_in = input;
  if (!first && carries_router_row()) {
    hidden_in = input.narrow(1, 0, input.size(1) - 1);
    router_losses_.unpack(input.select(1, input.size(1) - 1)[0], config_.num_local_experts);
  }
  // The sequence this chunk sees: token ids on the first stage, hidden states [B, T, D] after
  // (each rank's share of the tokens under all_to_all and ring_attn).
  const int64_t T = first || !holds_sequence_shard() ? hidden_in.size(1) : hidden_in.size(1) * parallel_.sp_size();
  if (parallel_.sp_mode == parallel::SequenceParallelMode::kSplitGather) {
    COLOSSAL_CHECK(T % parallel_.tp_size() == 0, "[llama] split_gather: sequence length ", T,
                   " does not divide by tp ", parallel_.tp_size());
  }
  const RotaryTables rope = rope_for(T, input.device());  // tensor handles: cheap to copy
  const TokenLayout layout = token_layout(T, packed, input.device());
  const auto& positions = layout.positions;
  torch::Tensor h;
  if (first) {
    auto ids = holds_sequence_shard() ? parallel::take_local(input, parallel_) : input;
    if (parallel_.grid_parallel()) ids = parallel::split_activation(ids, parallel_.grid.stream(), /*features=*/false);
    tools::MemoryTracer::Scope traced("embed_tokens");
    h = call(model->embed_tokens, ids);
    // Gemma: sqrt(hidden_size), rounded to the embedding's dtype as transformers does.
    if (config_.scale_embeddings)
      h = h * torch::scalar_tensor(std::sqrt(static_cast<double>(config_.hidden_size)), h.options());
    if (model->embed_positions) {
      auto whole = packed.defined() ? packed.to(input.device(), torch::kLong) : torch::arange(T, input.device());
      h = h + call(model->embed_positions, embedded_positions(holds_sequence_shard() ? positions : whole, T))
                  .to(h.dtype());
    }
    if (neftune_alpha_ > 0 && is_training()) {
      // The whole batch's noise, then this rank's tokens: the same on every rank that holds them.
      auto noise = nn::neftune_noise({h.size(0), T, h.size(2)}, neftune_alpha_, neftune_seed_ + neftune_draws_++);
      noise = noise.index_select(1, embedded_indices(T));
      if (parallel_.grid_parallel()) noise = parallel::split_activation(noise, parallel_.grid.stream());
      h = h + noise.to(h.device(), h.scalar_type());
    }
  } else {
    h = hidden_in;
  }
  const auto [begin, end] = chunk_layers_[chunk];
  auto* router = config_.is_moe() ? &router_losses_ : nullptr;
  for (size_t k = 0; k < model->layers.size(); ++k) {
    if (model->layer_ids[k] < begin || model->layer_ids[k] >= end) continue;
    auto& layer = model->layers[k];
    tools::MemoryTracer::Scope traced(tools::MemoryTracer::active() ? "layers." + std::to_string(model->layer_ids[k]) : "");
    if (gradient_checkpointing_ && is_training()) {
      // Captured by value: the closure runs again in backward, after this loop. A MoE layer's
      // feed-forward half stays outside: its routing feeds the auxiliary losses, which need the
      // router's graph from this forward, not a recomputation.
      auto l = layer.ptr();
      if (router) {
        h = nn::checkpoint([rope, layout, l](const torch::Tensor& x) { return l->attention_half(x, rope, layout); }, h);
        h = l->feed_forward_half(h, router);
      } else {
        h = nn::checkpoint([rope, layout, l](const torch::Tensor& x) { return l->forward(x, rope, layout); }, h);
      }
    } else {
      h = layer->forward(h, rope, layout, router);
    }
  }
  if (!last) {
    if (!carries_router_row()) return h;
    // Row 0 of the batch carries the statistics; the other rows of the extra position are zeros.
    auto stats = router_losses_.pack(h.size(2), h.scalar_type(), config_.num_local_experts).to(h.device())
                     .view({1, 1, h.size(2)});
    auto row = torch::cat({stats, torch::zeros({h.size(0) - 1, 1, h.size(2)}, h.options())}, 0);
    return torch::cat({h, row}, 1);
  }
  {
    tools::MemoryTracer::Scope traced("norm");
    h = call(model->norm, h);
  }
  if (to_hidden) return h;
  tools::MemoryTracer::Scope traced("lm_head");
  auto entered = parallel::enter_tensor_parallel(h, parallel_);
  const double cap = config_.final_logit_softcapping;
  if (lm_head) return cap > 0 ? soft_cap(call(lm_head, entered), cap) : call(lm_head, entered);
  const auto& embed = model->embed_tokens;
  auto logits = nn::run_hooked(*embed, {entered}, [&] { return torch::linear(entered, embed->weight); });
  if (cap > 0) logits = soft_cap(logits, cap);
  if (parallel_.tensor_parallel()) {  // padded vocabulary rows of the last ranks: never predicted
    const int64_t part = embed->weight.size(0), start = parallel_.tp_rank() * part;
    const int64_t real = std::clamp<int64_t>(config_.vocab_size - start, 0, part);
    if (real < part) logits = logits.index_fill(-1, torch::arange(real, part), -std::numeric_limits<float>::infinity());
  }
  return logits;
}

// Under pipeline parallelism the load-balancing loss still pools every layer of a microbatch (as
// one process does): each stage appends its routing statistics (probability sums with their
// graph, counts, z sums) to the running totals it received and sends them on as one extra sequence
// row of the activations; the last stage's loss reads the totals, and backward carries the
// losses' gradient to every stage's routers through the pipeline's own gradient messages. Exact in
// fp32; under bf16/fp16 activations the carried totals are rounded to that precision.
bool LlamaForCausalLMImpl::carries_router_row() const { return config_.is_moe() && parallel_.pipeline.enabled(); }

std::pair<bool, bool> LlamaForCausalLMImpl::chunk_ends(int chunk) const {
  const auto& pipe = parallel_.pipeline;
  return {!pipe.enabled() || pipe.chunk_of_first() == chunk, !pipe.enabled() || pipe.chunk_of_last() == chunk};
}

std::vector<torch::Tensor> LlamaForCausalLMImpl::chunk_parameters(int chunk) {
  std::vector<torch::Tensor> out;
  auto add = [&](torch::nn::Module& m) {
    for (auto& p : m.parameters()) out.push_back(p);
  };
  const auto [first, last] = chunk_ends(chunk);
  if (first) {
    add(*model->embed_tokens);
    if (model->embed_positions) add(*model->embed_positions);
  }
  const auto [begin, end] = chunk_layers_.at(chunk);
  for (size_t k = 0; k < model->layers.size(); ++k)
    if (model->layer_ids[k] >= begin && model->layer_ids[k] < end) add(*model->layers[k]);
  if (last) {
    add(*model->norm);
    if (lm_head) add(*lm_head);
  }
  return out;
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& positions) {
  if (parallel_.grid_parallel()) {
    // Gathered without a gradient path: training on a grid goes through loss(). A batch the
    // grid's rows do not divide (an evaluation's last one) is padded with copies of its first
    // row, whose logits are dropped.
    COLOSSAL_CHECK(!torch::GradMode::is_enabled() || !is_training(), "[llama] forward() with tp_mode ",
                   dist::to_string(parallel_.grid.mode()), " gathers the logits for reading only; train through loss()");
    const int64_t B = input_ids.size(0), rows = parallel_.grid.stream().row_parts(), pad = (rows - B % rows) % rows;
    auto padded = [&](const torch::Tensor& t) {
      return pad == 0 || !t.defined() || t.dim() < 2 ? t : torch::cat({t, t.narrow(0, 0, 1).expand({pad, t.size(1)})});
    };
    auto logits = local_logits(padded(input_ids), padded(positions));
    return parallel::gather_activation(logits, parallel_.grid.inner()).narrow(0, 0, B).narrow(-1, 0, config_.vocab_size);
  }
  auto logits = local_logits(input_ids, positions);
  if (parallel_.tensor_parallel())
    logits = parallel::gather_last_dim(logits, parallel_.tp).narrow(-1, 0, config_.vocab_size);
  if (holds_sequence_shard()) logits = parallel::gather_local(logits, parallel_);
  return logits;
}

torch::Tensor LlamaForCausalLMImpl::loss(const torch::Tensor& input_ids, const torch::Tensor& labels,
                                         const torch::Tensor& positions) {
  // The head and the loss fused (nn::linear_cross_entropy) wherever this rank holds the whole
  // head on the CPU: no logits-sized gradient besides the logits, which are read once. Under
  // tensor parallelism each rank holds a vocabulary slice (vocab_parallel_cross_entropy).
  const bool fused = !parallel_.tensor_parallel() && !parallel_.grid_parallel() && !parallel_.pipeline.enabled() &&
                     input_ids.device().is_cpu() && config_.final_logit_softcapping == 0;
  if (!fused) return loss_from_logits(local_logits(input_ids, positions), labels);
  auto hidden = run_chunk(0, input_ids, /*to_hidden=*/true, positions);
  auto flat_target = next_token_targets(labels).reshape({-1});
  auto flat = hidden.reshape({-1, hidden.size(2)});
  tools::MemoryTracer::Scope traced("lm_head");  // the loss with it: one fused step
  torch::nn::Module& head = lm_head ? static_cast<torch::nn::Module&>(*lm_head) : *model->embed_tokens;
  auto mean = nn::run_hooked(head, {flat}, [&] {
    const auto& weight = lm_head ? lm_head->weight : model->embed_tokens->weight;
    return nn::linear_cross_entropy(flat, weight, flat_target, -100);
  });
  return finish_loss(mean, flat_target, flat);
}

torch::Tensor LlamaForCausalLMImpl::token_log_probs(const torch::Tensor& input_ids, const torch::Tensor& labels,
                                                    const torch::Tensor& positions) {
  COLOSSAL_CHECK(!parallel_.pipeline.enabled(), "[llama] token_log_probs: not under pipeline parallelism (a "
                 "sequence's log-likelihood needs the head's stage); use tp, sp or data parallelism");
  COLOSSAL_CHECK(labels.sizes() == input_ids.sizes(), "[llama] token_log_probs: labels ", labels.sizes(),
                 " and input_ids ", input_ids.sizes(), " differ in shape");
  if (parallel_.grid_parallel()) {
    // Evaluation on a grid: the logits gathered whole on every rank (no gradient path; training
    // objectives that need one, DPO's and GRPO's, are not built on a grid yet).
    COLOSSAL_CHECK(!torch::GradMode::is_enabled(), "[llama] token_log_probs with tp_mode ",
                   dist::to_string(parallel_.grid.mode()), " is for evaluation (no gradient) only; preference and "
                   "policy-gradient training on a grid is not built yet (use --tp_mode 1d)");
    auto logits = forward(input_ids, positions);
    auto whole_target = shifted_targets(labels);
    return nn::token_log_probs(logits.reshape({-1, logits.size(2)}), whole_target.reshape({-1}).to(logits.device()),
                               -100)
        .reshape(whole_target.sizes());
  }
  auto target = next_token_targets(labels);  // this rank's positions
  const auto shape = target.sizes().vec();
  auto flat_target = target.reshape({-1});
  const bool fused = !parallel_.tensor_parallel() && input_ids.device().is_cpu() &&
                     config_.final_logit_softcapping == 0;
  if (!fused) {
    auto logits = local_logits(input_ids, positions);
    if (parallel_.tensor_parallel())  // the whole vocabulary (backward: each rank its slice)
      logits = parallel::gather_last_dim(logits, parallel_.tp).narrow(-1, 0, config_.vocab_size);
    return nn::token_log_probs(logits.reshape({-1, logits.size(2)}), flat_target, -100).reshape(shape);
  }
  auto hidden = run_chunk(0, input_ids, /*to_hidden=*/true, positions);
  auto flat = hidden.reshape({-1, hidden.size(2)});
  tools::MemoryTracer::Scope traced("lm_head");
  torch::nn::Module& head = lm_head ? static_cast<torch::nn::Module&>(*lm_head) : *model->embed_tokens;
  auto out = nn::run_hooked(head, {flat}, [&] {
    const auto& weight = lm_head ? lm_head->weight : model->embed_tokens->weight;
    return nn::linear_token_log_probs(flat, weight, flat_target, -100);
  });
  return out.reshape(shape);
}

void LlamaForCausalLMImpl::add_score_head(uint64_t seed) {
  COLOSSAL_CHECK(!score, "[llama] the model already has a score head");
  COLOSSAL_CHECK(!parallel_.grid_parallel(), "[llama] a reward model with tp_mode ",
                 dist::to_string(parallel_.grid.mode()), " is not built yet; use --tp_mode 1d");
  COLOSSAL_CHECK(!parallel_.pipeline.enabled(), "[llama] a reward model under pipeline parallelism is not supported "
                 "yet (the score needs the last stage's hidden states of whole sequences); use tp, sp or data "
                 "parallelism");
  COLOSSAL_CHECK(!parallel::splits_sequence_over_tp(parallel_), "[llama] a reward model under split_gather sequence "
                 "parallelism is not supported yet; use --sp_mode all_to_all or ring_attn");
  auto head = torch::nn::Linear(torch::nn::LinearOptions(config_.hidden_size, 1).bias(false));
  {
    torch::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    head->weight.copy_(at::normal(0.0, config_.initializer_range, {1, config_.hidden_size}, gen));
  }
  head->to(parameters().front().device());  // as LoRA's adapters: where the (possibly deferred) weights say
  score = register_module("score", head);
  if (lm_head) lm_head->weight.requires_grad_(false);
}

torch::Tensor LlamaForCausalLMImpl::sequence_scores(const torch::Tensor& input_ids, const torch::Tensor& last) {
  COLOSSAL_CHECK(score, "[llama] sequence_scores: the model has no score head (add_score_head)");
  COLOSSAL_CHECK(last.dim() == 1 && last.size(0) == input_ids.size(0), "[llama] sequence_scores: expected one "
                 "position per sequence [", input_ids.size(0), "], got ", last.sizes());
  auto hidden = run_chunk(0, input_ids, /*to_hidden=*/true);  // [B, T or T / sp, D]
  auto values = nn::run_hooked(*score, {hidden}, [&] {
    return torch::nn::functional::linear(hidden, score->weight.to(hidden.scalar_type()));
  }).squeeze(-1).to(torch::kFloat);
  const auto where = last.to(values.device(), torch::kLong);
  if (!holds_sequence_shard()) return values.gather(1, where.unsqueeze(1)).squeeze(1);
  // This rank's positions: the one holding last[b] contributes it, the sum over the group is it.
  auto positions = parallel::local_positions(input_ids.size(1), parallel_).to(values.device());
  auto mine = positions.unsqueeze(0).eq(where.unsqueeze(1)).to(values.scalar_type());
  return parallel::reduce_from_group((values * mine).sum(1), parallel_.sp);
}

torch::Tensor LlamaForCausalLMImpl::sum_over_sequence(const torch::Tensor& per_token) {
  auto sums = per_token.sum(1);
  return holds_sequence_shard() ? parallel::reduce_from_group(sums, parallel_.sp) : sums;
}

torch::Tensor LlamaForCausalLMImpl::next_token_targets(const torch::Tensor& labels) const {
  auto target = shifted_targets(labels);
  if (holds_sequence_shard()) target = parallel::take_local(target, parallel_);
  // On a grid the head's output holds the rows of the inner layout (grid/tensor_grid.h).
  if (parallel_.grid_parallel()) target = parallel::split_activation(target, parallel_.grid.inner(), false);
  return target;
}

torch::Tensor LlamaForCausalLMImpl::loss_from_logits(const torch::Tensor& logits, const torch::Tensor& labels) {
  auto flat_target = next_token_targets(labels).reshape({-1});
  tools::MemoryTracer::Scope traced("loss");
  auto flat = logits.reshape({-1, logits.size(2)});
  auto mean = parallel_.grid_parallel()       // the mean over the grid's rows, every rank the same
                  ? parallel::grid_cross_entropy(flat, flat_target, parallel_.grid.inner(), -100)
              : parallel_.tensor_parallel()  // the full logits never exist on one rank
                  ? parallel::vocab_parallel_cross_entropy(flat, flat_target, parallel_.tp, -100)
                  : nn::cross_entropy(flat, flat_target, -100);
  return finish_loss(mean, flat_target, flat);
}

torch::Tensor LlamaForCausalLMImpl::finish_loss(torch::Tensor mean, const torch::Tensor& flat_target,
                                                const torch::Tensor& anchor) {
  if (config_.is_moe() && is_training() && !router_losses_.empty()) {
    if (config_.router_aux_loss_coef > 0)
      mean = mean + config_.router_aux_loss_coef * router_losses_.load_balancing_loss().to(mean.scalar_type());
    if (config_.router_z_loss_coef > 0)
      mean = mean + config_.router_z_loss_coef * router_losses_.z_loss().to(mean.scalar_type());
  }
  if (!holds_sequence_shard()) return mean;
  // The mean over every rank's tokens: each rank's mean weighted by its share of the counted
  // targets, summed over the group (forward); each rank's gradient flows through its own term.
  auto counts = torch::stack({flat_target.ne(-100).sum()}).to(torch::kFloat64);
  auto local_count = counts.item<double>();
  dist::all_reduce(counts, parallel_.sp);
  const double total = counts.item<double>();
  auto share = local_count > 0 ? mean * (local_count / total) : (anchor.sum() * 0.0).to(mean.scalar_type());
  return parallel::reduce_from_group(share, parallel_.sp);
}

parallel::ParallelPlan parallel_plan(const LlamaConfig& config) {
  using parallel::SplitStyle;
  parallel::ParallelPlan plan;
  plan.rules = {
      {"model.embed_tokens", SplitStyle::kVocabEmbedding},
      {"model.embed_positions", SplitStyle::kReplicate},
      {"model.layers.*.self_attn.q_proj", SplitStyle::kColumn},
      {"model.layers.*.self_attn.k_proj", SplitStyle::kColumn, false, /*kv_heads=*/true},
      {"model.layers.*.self_attn.v_proj", SplitStyle::kColumn, false, /*kv_heads=*/true},
      {"model.layers.*.self_attn.o_proj", SplitStyle::kRow},
      {"model.layers.*.mlp.gate_proj", SplitStyle::kColumn},
      {"model.layers.*.mlp.up_proj", SplitStyle::kColumn},
      {"model.layers.*.mlp.down_proj", SplitStyle::kRow},
      // Mixtral: each expert splits like the dense MLP; the router is whole on every rank.
      {"model.layers.*.block_sparse_moe.gate", SplitStyle::kReplicate},
      {"model.layers.*.block_sparse_moe.experts.*.w1", SplitStyle::kColumn},
      {"model.layers.*.block_sparse_moe.experts.*.w3", SplitStyle::kColumn},
      {"model.layers.*.block_sparse_moe.experts.*.w2", SplitStyle::kRow},
      {"model.layers.*.input_layernorm", SplitStyle::kReplicate},
      {"model.layers.*.post_attention_layernorm", SplitStyle::kReplicate},
      {"model.layers.*.pre_feedforward_layernorm", SplitStyle::kReplicate},
      {"model.layers.*.post_feedforward_layernorm", SplitStyle::kReplicate},
      {"model.norm", SplitStyle::kReplicate},
  };
  if (!config.tie_word_embeddings) plan.rules.push_back({"lm_head", SplitStyle::kVocabHead});
  return plan;
}

}  // namespace colossal::llama
