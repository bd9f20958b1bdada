#include "llama/inference.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/tensor/layers.h"
#include "core/inference/kv_cache.h"
#include "llama/pretrained.h"

namespace colossal::llama {

namespace {
at::Tensor rms(const at::Tensor& x, const at::Tensor& w, double eps) {
  auto h = x.to(at::kFloat);
  h = h * at::rsqrt(h.pow(2).mean(-1, true) + eps);
  return (w * h).to(x.scalar_type());
}

// x [N, heads, d] fp32; cos/sin [N, d].
at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  auto half = x.size(-1) / 2;
  auto rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

at::Tensor project(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b = {}) {
  return b.defined() ? at::linear(x, w, b) : at::linear(x, w);
}
}  // namespace

LlamaInference::LlamaInference(LlamaForCausalLM& model, Options options)
    : config_(model->config()), options_(options), parallel_(model->parallel_context()) {
  COLOSSAL_CHECK(options.dtype == at::kFloat || options.dtype == at::kBFloat16,
                 "[llama] inference dtype must be float32 or bfloat16, got ", options.dtype);
  torch::NoGradGuard no_grad;
  auto cvt = [&](const at::Tensor& t) { return t.detach().to(options_.dtype).contiguous(); };
  auto fp32 = [](const at::Tensor& t) { return t.detach().to(at::kFloat).contiguous(); };
  const int64_t d = config_.resolved_head_dim(), kv = config_.num_key_value_heads;
  const int tp = parallel_.tp_size();
  heads_ = config_.num_attention_heads / tp;
  // Fewer kv heads than tp: the model keeps them whole; this rank's queries read only one.
  const bool kv_whole = tp > 1 && kv < tp;
  kv_heads_ = kv_whole ? 1 : kv / tp;
  const int64_t kv_select = kv_whole ? parallel_.tp_rank() * heads_ / (config_.num_attention_heads / kv) : 0;
  auto kv_rows = [&](const at::Tensor& t) { return kv_whole ? t.narrow(0, kv_select * d, d) : t; };
  for (auto& l : model->model->layers) {
    Layer x;
    auto& a = l->self_attn;
    x.qkv = cvt(at::cat({a->q_proj->weight, kv_rows(a->k_proj->weight), kv_rows(a->v_proj->weight)}, 0));
    if (config_.attention_bias) {
      x.qkv_bias = cvt(at::cat({a->q_proj->bias, kv_rows(a->k_proj->bias), kv_rows(a->v_proj->bias)}, 0));
      // Added once, after the reduction (every rank holds it whole).
      x.o_bias = cvt(a->o_proj->bias);
    }
    x.o = cvt(a->o_proj->weight);
    if (l->block_sparse_moe) {
      const auto& moe = l->block_sparse_moe;
      COLOSSAL_CHECK(moe->placement().ep_size() == 1, "[llama] inference holds every expert on each process (ep 1)");
      x.router = cvt(moe->gate->weight);
      for (auto& e : moe->experts) {
        x.expert_gate_up.push_back(cvt(at::cat({e->w1->weight, e->w3->weight}, 0)));
        x.expert_down.push_back(cvt(e->w2->weight));
      }
      router_ = moe->router();
    } else {
      x.gate_up = cvt(at::cat({l->mlp->gate_proj->weight, l->mlp->up_proj->weight}, 0));
      x.down = cvt(l->mlp->down_proj->weight);
    }
    x.input_norm = fp32(l->input_layernorm->weight);
    x.post_norm = fp32(l->post_attention_layernorm->weight);
    layers_.push_back(std::move(x));
  }
  embed_ = cvt(model->model->embed_tokens->weight);
  vocab_start_ = parallel_.tp_rank() * embed_.size(0);
  norm_ = fp32(model->model->norm->weight);
  lm_head_ = model->lm_head ? cvt(model->lm_head->weight) : embed_;
  auto tables = RotaryTables::make(config_, config_.max_position_embeddings);
  cos_ = tables.cos;
  sin_ = tables.sin;
}

std::shared_ptr<LlamaInference> LlamaInference::load(const std::string& dir, Options options,
                                                     const parallel::ParallelContext& parallel) {
  auto loaded = load_pretrained(dir, {}, parallel);
  return std::make_shared<LlamaInference>(loaded.model, options);
}

inference::CacheShape LlamaInference::cache_shape() const {
  return {config_.num_hidden_layers, kv_heads_, config_.resolved_head_dim(), options_.dtype};
}

at::Tensor LlamaInference::all_reduced(at::Tensor x) const {
  if (!parallel_.tensor_parallel()) return x;
  x = x.contiguous();
  dist::all_reduce(x, parallel_.tp);
  return x;
}

// Mixtral's block: route every token, run each expert once over its tokens, one all-reduce of
// every expert's partial output under tensor parallelism.
at::Tensor LlamaInference::mixture_of_experts(const at::Tensor& x, const Layer& L, int64_t ffn) const {
  auto routing = parallel::expert::route(project(x, L.router), router_);
  parallel::expert::LocalExperts experts;
  experts.run = [&](int64_t e, const at::Tensor& rows) {
    auto gu = project(rows, L.expert_gate_up[e]);
    return project(at::silu(gu.narrow(1, 0, ffn)) * gu.narrow(1, ffn, ffn), L.expert_down[e]);
  };
  if (parallel_.tensor_parallel()) experts.finish = [&](const at::Tensor& out) { return all_reduced(out); };
  parallel::expert::ExpertPlacement every;  // inference holds every expert
  every.num_experts = router_.num_experts;
  return parallel::expert::dispatch_and_combine(x, routing, every, experts);
}

at::Tensor LlamaInference::forward(const inference::ModelInput& in, inference::PagedKVCache& cache) {
  c10::InferenceMode guard;
  const int64_t n = in.tokens.size(0), heads = heads_, kv = kv_heads_;
  const int64_t d = config_.resolved_head_dim(), ffn = config_.intermediate_size / parallel_.tp_size();
  const double eps = config_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(d));
  COLOSSAL_CHECK(in.positions.max().item<int64_t>() < cos_.size(0), "[llama] position beyond max_position_embeddings ",
                 config_.max_position_embeddings);
  auto cos = cos_.index_select(0, in.positions), sin = sin_.index_select(0, in.positions);
  auto h = parallel_.tensor_parallel()  // [N, D]
               ? all_reduced(parallel::vocab_parallel_partial_lookup(embed_, in.tokens, vocab_start_))
               : embed_.index_select(0, in.tokens);
  for (size_t li = 0; li < layers_.size(); ++li) {
    const auto& L = layers_[li];
    auto qkv = project(rms(h, L.input_norm, eps), L.qkv, L.qkv_bias);
    auto q = rope(qkv.narrow(1, 0, heads * d).view({n, heads, d}).to(at::kFloat), cos, sin);
    auto k = rope(qkv.narrow(1, heads * d, kv * d).view({n, kv, d}).to(at::kFloat), cos, sin);
    auto v = qkv.narrow(1, (heads + kv) * d, kv * d).reshape({n, kv, d});
    cache.write(static_cast<int64_t>(li), in.attention.slots, k, v);
    auto attn = inference::paged_attention(q, cache, static_cast<int64_t>(li), in.attention, scale);
    auto o = all_reduced(project(attn.view({n, heads * d}).to(options_.dtype), L.o));
    h = h + (L.o_bias.defined() ? o + L.o_bias : o);
    auto normed = rms(h, L.post_norm, eps);
    if (L.router.defined()) {
      h = h + mixture_of_experts(normed, L, ffn);
      continue;
    }
    auto gu = project(normed, L.gate_up);
    h = h + all_reduced(project(at::silu(gu.narrow(1, 0, ffn)) * gu.narrow(1, ffn, ffn), L.down));
  }
  auto last = rms(h.index_select(0, in.sample_index), norm_, eps);
  auto logits = project(last, lm_head_).to(at::kFloat).contiguous();  // [S, vocab / tp]
  if (!parallel_.tensor_parallel()) return logits;
  // Every rank's vocabulary slice, in rank order; the padding sits at the end.
  const int tp = parallel_.tp_size();
  auto all = at::empty({tp * logits.size(0), logits.size(1)}, logits.options());
  dist::all_gather(all, logits, parallel_.tp);
  return all.view({tp, logits.size(0), logits.size(1)}).permute({1, 0, 2}).reshape({logits.size(0), -1})
      .narrow(1, 0, config_.vocab_size).contiguous();
}

}  // namespace colossal::llama
