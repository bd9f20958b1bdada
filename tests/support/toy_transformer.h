#pragma once
// A toy decoder-only transformer for testing core's parallel machinery without a model library:
// token embeddings, pre-norm blocks of causal multi-head attention and a gated MLP, a final norm
// and an untied head, built through a parallel plan (core/parallel/apply_plan.h) so the same
// code runs whole or tensor-parallel. Its parameters are named and shaped as a LLaMA-family
// decoder's without rotary embeddings (positions come from causality alone), so the analysis
// formulas of core/tools count it as tools::ModelSpec{.family = "llama"} (spec() below).
#include <torch/torch.h>

#include <string>

#include "core/nn/module_hooks.h"
#include "core/nn/rms_norm.h"
#include "core/parallel/apply_plan.h"
#include "core/parallel/tensor/layers.h"
#include "core/tools/model_analysis.h"

namespace colossal::testing {

struct ToyTransformerShape {
  int64_t vocab = 80, hidden = 32, intermediate = 48, heads = 4, layers = 2;
  tools::ModelSpec spec() const {
    return {.family = "llama", .vocab = vocab, .hidden = hidden, .intermediate = intermediate, .layers = layers,
            .heads = heads, .kv_heads = heads};
  }
};

/// The plan: attention and MLP split Megatron-style (column in, row out), the vocabulary split
/// for the embedding and the head, norms whole.
inline parallel::ParallelPlan toy_transformer_plan() {
  using parallel::SplitStyle;
  parallel::ParallelPlan plan;
  plan.rules = {{"model.embed_tokens", SplitStyle::kVocabEmbedding},
                {"model.layers.*.self_attn.q_proj", SplitStyle::kColumn},
                {"model.layers.*.self_attn.k_proj", SplitStyle::kColumn},
                {"model.layers.*.self_attn.v_proj", SplitStyle::kColumn},
                {"model.layers.*.self_attn.o_proj", SplitStyle::kRow},
                {"model.layers.*.mlp.gate_proj", SplitStyle::kColumn},
                {"model.layers.*.mlp.up_proj", SplitStyle::kColumn},
                {"model.layers.*.mlp.down_proj", SplitStyle::kRow},
                {"lm_head", SplitStyle::kVocabHead}};
  return plan;
}

class ToyNormImpl : public torch::nn::Module {
 public:
  explicit ToyNormImpl(int64_t dim) { weight = register_parameter("weight", torch::ones({dim})); }
  torch::Tensor forward(const torch::Tensor& x) { return nn::rms_norm(x, weight, 1e-6); }
  torch::Tensor weight;
};
TORCH_MODULE(ToyNorm);

class ToyBlockImpl : public torch::nn::Module {
 public:
  ToyBlockImpl(const ToyTransformerShape& s, const parallel::PlanBuilder& where) : ctx_(where.parallel) {
    const auto attn = where.at("self_attn"), mlp = where.at("mlp");
    q_proj = attn_module("q_proj", attn.at("q_proj").linear(s.hidden, s.hidden, false));
    k_proj = attn_module("k_proj", attn.at("k_proj").linear(s.hidden, s.hidden, false));
    v_proj = attn_module("v_proj", attn.at("v_proj").linear(s.hidden, s.hidden, false));
    o_proj = attn_module("o_proj", attn.at("o_proj").linear(s.hidden, s.hidden, false));
    gate_proj = mlp_->register_module("gate_proj", mlp.at("gate_proj").linear(s.hidden, s.intermediate, false));
    up_proj = mlp_->register_module("up_proj", mlp.at("up_proj").linear(s.hidden, s.intermediate, false));
    down_proj = mlp_->register_module("down_proj", mlp.at("down_proj").linear(s.intermediate, s.hidden, false));
    register_module("self_attn", attn_);
    register_module("mlp", mlp_);
    input_layernorm = register_module("input_layernorm", ToyNorm(s.hidden));
    post_attention_layernorm = register_module("post_attention_layernorm", ToyNorm(s.hidden));
    local_heads_ = s.heads / ctx_.tp_size();
    head_dim_ = s.hidden / s.heads;
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x + attention(nn::call(input_layernorm, x));
    auto m = parallel::enter_tensor_parallel(nn::call(post_attention_layernorm, h), ctx_);
    return h + nn::call(down_proj, torch::silu(nn::call(gate_proj, m)) * nn::call(up_proj, m));
  }

  parallel::ParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  parallel::ParallelLinear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
  ToyNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};

 private:
  parallel::ParallelLinear attn_module(const std::string& name, parallel::ParallelLinear layer) {
    return attn_->register_module(name, std::move(layer));
  }
  torch::Tensor attention(const torch::Tensor& x_in) {
    auto x = parallel::enter_tensor_parallel(x_in, ctx_);  // one gradient all-reduce for q, k, v
    const int64_t B = x.size(0), T = x.size(1);
    auto split = [&](const torch::Tensor& t) { return t.view({B, T, local_heads_, head_dim_}).transpose(1, 2); };
    auto out = at::scaled_dot_product_attention(split(nn::call(q_proj, x)), split(nn::call(k_proj, x)),
                                                split(nn::call(v_proj, x)), {}, 0.0, /*is_causal=*/true);
    return nn::call(o_proj, out.transpose(1, 2).reshape({B, T, local_heads_ * head_dim_}));
  }
  parallel::ParallelContext ctx_;
  std::shared_ptr<torch::nn::Module> attn_ = std::make_shared<torch::nn::Module>();
  std::shared_ptr<torch::nn::Module> mlp_ = std::make_shared<torch::nn::Module>();
  int64_t local_heads_ = 0, head_dim_ = 0;
};
TORCH_MODULE(ToyBlock);

class ToyTransformerImpl : public torch::nn::Module {
 public:
  /// Built whole (a default context) or as this rank's tensor-parallel part.
  explicit ToyTransformerImpl(ToyTransformerShape s = {}, const parallel::ParallelContext& ctx = {})
      : shape_(s), ctx_(ctx) {
    const auto plan = toy_transformer_plan();
    const parallel::PlanBuilder root{plan, ctx_, ""};
    auto body = std::make_shared<torch::nn::Module>();
    embed_tokens = body->register_module("embed_tokens", root.at("model").at("embed_tokens").embedding(s.vocab, s.hidden));
    auto layers = std::make_shared<torch::nn::Module>();
    for (int64_t i = 0; i < s.layers; ++i)
      blocks.push_back(layers->register_module(std::to_string(i), ToyBlock(s, root.at("model").at("layers").at(std::to_string(i)))));
    body->register_module("layers", layers);
    norm = body->register_module("norm", ToyNorm(s.hidden));
    register_module("model", body);
    lm_head = register_module("lm_head", root.at("lm_head").linear(s.hidden, s.vocab, false));
  }

  /// Mean next-token cross entropy of `ids` [B, T] (each position predicts the next).
  torch::Tensor loss(const torch::Tensor& ids) {
    // Every module through nn::call, so Gemini gathers each one's parameters on demand.
    auto h = nn::call(embed_tokens, ids);
    for (auto& b : blocks) h = b->forward(h);
    auto logits = nn::call(lm_head, parallel::enter_tensor_parallel(nn::call(norm, h), ctx_));
    const int64_t T = ids.size(1);
    auto flat = logits.narrow(1, 0, T - 1).reshape({-1, logits.size(-1)});
    auto target = ids.narrow(1, 1, T - 1).reshape({-1});
    return ctx_.tensor_parallel() ? parallel::vocab_parallel_cross_entropy(flat, target, ctx_.tp)
                                  : torch::nn::functional::cross_entropy(flat, target);
  }

  const ToyTransformerShape& shape() const { return shape_; }
  parallel::ParallelEmbedding embed_tokens{nullptr};
  std::vector<ToyBlock> blocks;
  ToyNorm norm{nullptr};
  parallel::ParallelLinear lm_head{nullptr};

 private:
  ToyTransformerShape shape_;
  parallel::ParallelContext ctx_;
};
TORCH_MODULE(ToyTransformer);

}  // namespace colossal::testing
