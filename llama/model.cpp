#include "llama/model.h"

#include <torch/torch.h>

#include "core/nn/activation_checkpoint.h"
#include "core/nn/fused_losses.h"
#include "core/nn/module_hooks.h"
#include "core/nn/rms_norm.h"

namespace colossal::llama {

using nn::call;

RMSNormImpl::RMSNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) {
  // In fp32 whatever the compute dtype, as Hugging Face does (fused when everything is fp32).
  return nn::rms_norm(x, weight, eps_);
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
torch::Tensor rotate_half(const torch::Tensor& x) {
  auto half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}
torch::Tensor apply_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  return x * cos + rotate_half(x) * sin;  // x: [B, H, T, D]; cos/sin: [T, D]
}
}  // namespace

AttentionImpl::AttentionImpl(const LlamaConfig& c)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.resolved_head_dim()) {
  auto lin = [&](int64_t in, int64_t out, bool bias) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
  };
  q_proj = register_module("q_proj", lin(c.hidden_size, heads_ * head_dim_, c.attention_bias));
  k_proj = register_module("k_proj", lin(c.hidden_size, kv_heads_ * head_dim_, c.attention_bias));
  v_proj = register_module("v_proj", lin(c.hidden_size, kv_heads_ * head_dim_, c.attention_bias));
  o_proj = register_module("o_proj", lin(heads_ * head_dim_, c.hidden_size, c.attention_bias));
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const RotaryTables& rope) {
  int64_t B = x.size(0), T = x.size(1);
  auto q = call(q_proj, x).view({B, T, heads_, head_dim_}).transpose(1, 2);
  auto k = call(k_proj, x).view({B, T, kv_heads_, head_dim_}).transpose(1, 2);
  auto v = call(v_proj, x).view({B, T, kv_heads_, head_dim_}).transpose(1, 2);
  auto cos = rope.cos.narrow(0, 0, T).to(x.scalar_type());
  auto sin = rope.sin.narrow(0, 0, T).to(x.scalar_type());
  q = apply_rope(q, cos, sin);
  k = apply_rope(k, cos, sin);
  auto out = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0,
                                              /*is_causal=*/true, /*scale=*/std::nullopt,
                                              /*enable_gqa=*/kv_heads_ != heads_);
  return call(o_proj, out.transpose(1, 2).reshape({B, T, heads_ * head_dim_}));
}

MLPImpl::MLPImpl(const LlamaConfig& c) {
  auto lin = [](int64_t in, int64_t out) { return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)); };
  gate_proj = register_module("gate_proj", lin(c.hidden_size, c.intermediate_size));
  up_proj = register_module("up_proj", lin(c.hidden_size, c.intermediate_size));
  down_proj = register_module("down_proj", lin(c.intermediate_size, c.hidden_size));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  return call(down_proj, torch::silu(call(gate_proj, x)) * call(up_proj, x));
}

DecoderLayerImpl::DecoderLayerImpl(const LlamaConfig& c) {
  self_attn = register_module("self_attn", Attention(c));
  mlp = register_module("mlp", MLP(c));
  input_layernorm = register_module("input_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
  post_attention_layernorm = register_module("post_attention_layernorm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const RotaryTables& rope) {
  auto h = x + self_attn->forward(call(input_layernorm, x), rope);
  return h + mlp->forward(call(post_attention_layernorm, h));
}

DecoderImpl::DecoderImpl(const LlamaConfig& c) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  auto list = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(DecoderLayer(c));
    list->push_back(layers.back());
  }
  norm = register_module("norm", RMSNorm(c.hidden_size, c.rms_norm_eps));
}

LlamaForCausalLMImpl::LlamaForCausalLMImpl(const LlamaConfig& config) : config_(config) {
  config_.validate();
  model = register_module("model", Decoder(config_));
  // Tied: no lm_head module; the output layer multiplies by the embedding matrix (saved once,
  // as Hugging Face does for tied weights).
  if (!config_.tie_word_embeddings) {
    lm_head = register_module("lm_head", torch::nn::Linear(
        torch::nn::LinearOptions(config_.hidden_size, config_.vocab_size).bias(false)));
  }
  rope_ = RotaryTables::make(config_, config_.max_position_embeddings);
  reset_parameters();
}

void LlamaForCausalLMImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    if (p.dim() == 1) {
      if (item.key().find("norm") != std::string::npos) p.fill_(1.0);
      else p.zero_();
    } else {
      p.normal_(0.0, config_.initializer_range);
    }
  }
}

const RotaryTables& LlamaForCausalLMImpl::rope_for(int64_t seq_len) {
  if (seq_len <= rope_.cos.size(0)) return rope_;
  // Dynamic (NTK) scaling is defined past the trained length: the rotary base grows with the
  // sequence, so tables are rebuilt for it (and kept for the next call of the same length).
  TORCH_CHECK(config_.rope_scaling.type == "dynamic", "[llama] sequence of ", seq_len,
              " tokens exceeds max_position_embeddings ", config_.max_position_embeddings,
              " (only rope_scaling 'dynamic' extends past it)");
  if (!long_rope_.cos.defined() || long_rope_.cos.size(0) != seq_len) long_rope_ = RotaryTables::make(config_, seq_len);
  return long_rope_;
}

torch::Tensor LlamaForCausalLMImpl::forward(const torch::Tensor& input_ids) {
  const RotaryTables rope = rope_for(input_ids.size(1));  // tensor handles: cheap to copy
  auto h = call(model->embed_tokens, input_ids);
  for (auto& layer : model->layers) {
    if (gradient_checkpointing_ && is_training()) {
      // Captured by value: the closure runs again in backward, after this loop.
      h = nn::checkpoint([rope, l = layer.ptr()](const torch::Tensor& x) { return l->forward(x, rope); }, h);
    } else {
      h = layer->forward(h, rope);
    }
  }
  h = call(model->norm, h);
  if (lm_head) return call(lm_head, h);
  const auto& embed = model->embed_tokens;
  return nn::run_hooked(*embed, [&] { return torch::linear(h, embed->weight); });
}

torch::Tensor LlamaForCausalLMImpl::loss(const torch::Tensor& input_ids, const torch::Tensor& labels) {
  auto logits = forward(input_ids);
  // Position t predicts labels[t + 1]; the last position has nothing to predict (-100). Shifting
  // the labels rather than slicing the logits keeps backward from building a zero-filled copy of
  // the whole logits tensor.
  auto target = torch::full_like(labels, -100);
  int64_t T = labels.size(1);
  target.narrow(1, 0, T - 1).copy_(labels.narrow(1, 1, T - 1));
  return nn::cross_entropy(logits.reshape({-1, logits.size(2)}), target.reshape({-1}), -100);
}

parallel::ParallelPlan parallel_plan(const LlamaConfig& config) {
  using parallel::SplitStyle;
  parallel::ParallelPlan plan;
  plan.rules = {
      {"model.embed_tokens", SplitStyle::kVocabEmbedding},
      {"model.layers.*.self_attn.q_proj", SplitStyle::kColumn},
      {"model.layers.*.self_attn.k_proj", SplitStyle::kColumn, false, /*kv_heads=*/true},
      {"model.layers.*.self_attn.v_proj", SplitStyle::kColumn, false, /*kv_heads=*/true},
      {"model.layers.*.self_attn.o_proj", SplitStyle::kRow},
      {"model.layers.*.mlp.gate_proj", SplitStyle::kColumn},
      {"model.layers.*.mlp.up_proj", SplitStyle::kColumn},
      {"model.layers.*.mlp.down_proj", SplitStyle::kRow},
      {"model.layers.*.input_layernorm", SplitStyle::kReplicate},
      {"model.layers.*.post_attention_layernorm", SplitStyle::kReplicate},
      {"model.norm", SplitStyle::kReplicate},
  };
  if (!config.tie_word_embeddings) plan.rules.push_back({"lm_head", SplitStyle::kVocabHead});
  return plan;
}

}  // namespace colossal::llama
