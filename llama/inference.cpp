#include "llama/inference.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"
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
    : config_(model->config()), options_(options) {
  COLOSSAL_CHECK(options.dtype == at::kFloat || options.dtype == at::kBFloat16,
                 "[llama] inference dtype must be float32 or bfloat16, got ", options.dtype);
  torch::NoGradGuard no_grad;
  auto cvt = [&](const at::Tensor& t) { return t.detach().to(options_.dtype).contiguous(); };
  auto fp32 = [](const at::Tensor& t) { return t.detach().to(at::kFloat).contiguous(); };
  for (auto& l : model->model->layers) {
    Layer x;
    auto& a = l->self_attn;
    x.qkv = cvt(at::cat({a->q_proj->weight, a->k_proj->weight, a->v_proj->weight}, 0));
    if (config_.attention_bias) {
      x.qkv_bias = cvt(at::cat({a->q_proj->bias, a->k_proj->bias, a->v_proj->bias}, 0));
      x.o_bias = cvt(a->o_proj->bias);
    }
    x.o = cvt(a->o_proj->weight);
    x.gate_up = cvt(at::cat({l->mlp->gate_proj->weight, l->mlp->up_proj->weight}, 0));
    x.down = cvt(l->mlp->down_proj->weight);
    x.input_norm = fp32(l->input_layernorm->weight);
    x.post_norm = fp32(l->post_attention_layernorm->weight);
    layers_.push_back(std::move(x));
  }
  embed_ = cvt(model->model->embed_tokens->weight);
  norm_ = fp32(model->model->norm->weight);
  lm_head_ = model->lm_head ? cvt(model->lm_head->weight) : embed_;
  auto tables = RotaryTables::make(config_, config_.max_position_embeddings);
  cos_ = tables.cos;
  sin_ = tables.sin;
}

std::shared_ptr<LlamaInference> LlamaInference::load(const std::string& dir, Options options) {
  auto loaded = load_pretrained(dir);
  return std::make_shared<LlamaInference>(loaded.model, options);
}

inference::CacheShape LlamaInference::cache_shape() const {
  return {config_.num_hidden_layers, config_.num_key_value_heads, config_.resolved_head_dim(), options_.dtype};
}

at::Tensor LlamaInference::forward(const inference::ModelInput& in, inference::PagedKVCache& cache) {
  c10::InferenceMode guard;
  const int64_t n = in.tokens.size(0), heads = config_.num_attention_heads, kv = config_.num_key_value_heads;
  const int64_t d = config_.resolved_head_dim(), ffn = config_.intermediate_size;
  const double eps = config_.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(d));
  COLOSSAL_CHECK(in.positions.max().item<int64_t>() < cos_.size(0), "[llama] position beyond max_position_embeddings ",
                 config_.max_position_embeddings);
  auto cos = cos_.index_select(0, in.positions), sin = sin_.index_select(0, in.positions);
  auto h = embed_.index_select(0, in.tokens);  // [N, D]
  for (size_t li = 0; li < layers_.size(); ++li) {
    const auto& L = layers_[li];
    auto qkv = project(rms(h, L.input_norm, eps), L.qkv, L.qkv_bias);
    auto q = rope(qkv.narrow(1, 0, heads * d).view({n, heads, d}).to(at::kFloat), cos, sin);
    auto k = rope(qkv.narrow(1, heads * d, kv * d).view({n, kv, d}).to(at::kFloat), cos, sin);
    auto v = qkv.narrow(1, (heads + kv) * d, kv * d).reshape({n, kv, d});
    cache.write(static_cast<int64_t>(li), in.attention.slots, k, v);
    auto attn = inference::paged_attention(q, cache, static_cast<int64_t>(li), in.attention, scale);
    h = h + project(attn.view({n, heads * d}).to(options_.dtype), L.o, L.o_bias);
    auto gu = project(rms(h, L.post_norm, eps), L.gate_up);
    h = h + project(at::silu(gu.narrow(1, 0, ffn)) * gu.narrow(1, ffn, ffn), L.down);
  }
  auto last = rms(h.index_select(0, in.sample_index), norm_, eps);
  return project(last, lm_head_).to(at::kFloat);
}

}  // namespace colossal::llama
