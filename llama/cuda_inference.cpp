#include "llama/cuda_inference.h"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/common/check.h"
#include "core/cuda/ops.h"
#include "llama/pretrained.h"

namespace colossal::llama {
namespace {

// A fresh prompt at least this long attends through SDPA; shorter chunks through the paged kernel.
constexpr int64_t kSdpaPrefillMin = 8;

}  // namespace

at::ScalarType LlamaCudaInference::dtype_named(const std::string& name) {
  if (name == "fp32" || name == "float32") return at::kFloat;
  if (name == "bf16" || name == "bfloat16") return at::kBFloat16;
  if (name == "fp16" || name == "float16") return at::kHalf;
  COLOSSAL_FAIL("[llama] --dtype ", name, " on a GPU: expected fp32, bf16 or fp16 (int8/int4 are the CPU engine's formats)");
}

LlamaCudaInference::LlamaCudaInference(LlamaForCausalLM& model, Options options)
    : config_(model->config()), options_(options) {
  COLOSSAL_CHECK(options.device.is_cuda(), "[llama] LlamaCudaInference runs on a CUDA device, got ", options.device);
  COLOSSAL_CHECK(cuda::kernels_usable(), "[llama] --device ", options.device,
                 ": no CUDA GPU is visible (or this build has no CUDA kernels)");
  COLOSSAL_CHECK(model->config().sliding_window == 0, "[llama] the GPU engine has no sliding-window attention yet; "
                 "a model with sliding_window ", model->config().sliding_window, " runs on the CPU engine (--device cpu)");
  const auto& c = model->config();
  COLOSSAL_CHECK(c.hidden_act == "silu" && !c.norm_plus_one && !c.sandwich_norms && !c.scale_embeddings &&
                     c.attn_logit_softcapping == 0 && c.final_logit_softcapping == 0 && c.query_pre_attn_scalar == 0 &&
                     !c.learned_positions && !c.layer_norm && c.gated_mlp,
                 "[llama] the GPU engine does not run ", c.model_type, " yet (GeGLU, (1 + w) norms, scaled "
                 "embeddings, soft-capping, learned positions, LayerNorm); it runs on the CPU engine (--device cpu)");
  COLOSSAL_CHECK(!model->parallel_context().tensor_parallel(),
                 "[llama] the GPU engine runs one process; --tp > 1 is the CPU engine's (use --device cpu)");
  COLOSSAL_CHECK(options.dtype == at::kFloat || options.dtype == at::kBFloat16 || options.dtype == at::kHalf,
                 "[llama] GPU inference dtype must be fp32, bf16 or fp16, got ", options.dtype);
  torch::NoGradGuard no_grad;
  auto put = [&](const at::Tensor& t) { return t.detach().to(options_.device, options_.dtype).contiguous(); };
  head_dim_ = config_.resolved_head_dim();
  heads_ = config_.num_attention_heads;
  kv_heads_ = config_.num_key_value_heads;
  for (auto& l : model->model->layers) {
    COLOSSAL_CHECK(!l->block_sparse_moe, "[llama] the GPU engine serves dense models; a mixture of experts runs on "
                   "the CPU engine (--device cpu)");
    Layer x;
    auto& a = l->self_attn;
    x.qkv = put(at::cat({a->q_proj->weight, a->k_proj->weight, a->v_proj->weight}, 0));
    if (config_.q_k_v_bias()) x.qkv_bias = put(at::cat({a->q_proj->bias, a->k_proj->bias, a->v_proj->bias}, 0));
    if (config_.attention_bias) x.o_bias = put(a->o_proj->bias);
    if (a->q_norm) {
      x.q_norm = put(a->q_norm->weight);
      x.k_norm = put(a->k_norm->weight);
    }
    x.o = put(a->o_proj->weight);
    x.gate_up = put(at::cat({l->mlp->gate_proj->weight, l->mlp->up_proj->weight}, 0));
    x.down = put(l->mlp->down_proj->weight);
    x.input_norm = put(l->input_layernorm->weight);
    x.post_norm = put(l->post_attention_layernorm->weight);
    layers_.push_back(std::move(x));
  }
  embed_ = put(model->model->embed_tokens->weight);
  norm_ = put(model->model->norm->weight);
  lm_head_ = model->lm_head ? put(model->lm_head->weight) : embed_;
  auto tables = RotaryTables::make(config_, config_.max_position_embeddings);
  cos_ = tables.cos.to(options_.device).contiguous();
  sin_ = tables.sin.to(options_.device).contiguous();
}

std::shared_ptr<LlamaCudaInference> LlamaCudaInference::load(const std::string& dir, Options options) {
  auto loaded = load_pretrained(dir, {});
  return std::make_shared<LlamaCudaInference>(loaded.model, options);
}

inference::CacheShape LlamaCudaInference::cache_shape() const {
  inference::CacheShape s;
  s.layers = static_cast<int64_t>(layers_.size());
  s.kv_heads = kv_heads_;
  s.head_dim = head_dim_;
  s.dtype = options_.dtype;
  s.device = options_.device;
  return s;
}

int64_t LlamaCudaInference::weight_bytes_per_token() const {
  int64_t bytes = lm_head_.nbytes();
  for (const auto& l : layers_) bytes += l.qkv.nbytes() + l.o.nbytes() + l.gate_up.nbytes() + l.down.nbytes();
  return bytes;
}

LlamaCudaInference::AttentionPlan LlamaCudaInference::plan_attention(const inference::ModelInput& in) const {
  const auto device = options_.device;
  const int64_t n = in.tokens.size(0);
  const int32_t* seq = in.attention.token_seq.const_data_ptr<int32_t>();
  const int32_t* context = in.attention.token_context.const_data_ptr<int32_t>();
  const int64_t* pos = in.positions.const_data_ptr<int64_t>();
  AttentionPlan plan;
  std::vector<int64_t> paged;
  for (int64_t r = 0, e = 0; r < n; r = e) {
    for (e = r + 1; e < n && seq[e] == seq[r];) ++e;
    if (pos[r] == 0 && e - r >= kSdpaPrefillMin) {
      plan.sdpa.emplace_back(r, e);
      continue;
    }
    for (int64_t i = r; i < e; ++i) {
      paged.push_back(i);
      plan.max_context = std::max<int64_t>(plan.max_context, context[i]);
    }
  }
  plan.paged = static_cast<int64_t>(paged.size());
  if (plan.paged == 0) return plan;
  plan.all_paged = plan.paged == n;
  plan.block_tables = in.attention.block_tables.to(device, /*non_blocking=*/true).contiguous();
  if (plan.all_paged) {
    plan.seq = in.attention.token_seq.to(device, true);
    plan.context = in.attention.token_context.to(device, true);
  } else {
    auto rows = at::tensor(paged, at::kLong);
    plan.paged_rows = rows.to(device, true);
    plan.seq = in.attention.token_seq.index_select(0, rows).to(device, true);
    plan.context = in.attention.token_context.index_select(0, rows).to(device, true);
  }
  return plan;
}

// q [n, H, D] (rotated), k/v [n, KV, D] (k rotated; both already in the cache).
at::Tensor LlamaCudaInference::attention(const AttentionPlan& plan, const at::Tensor& q, const at::Tensor& k,
                                         const at::Tensor& v, inference::PagedKVCache& cache, int64_t layer) const {
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim_));
  auto out = at::empty_like(q);
  for (auto [r, e] : plan.sdpa) {
    const int64_t len = e - r;
    auto qs = q.narrow(0, r, len).transpose(0, 1).unsqueeze(0);  // [1, H, len, D]
    auto ks = k.narrow(0, r, len).transpose(0, 1).unsqueeze(0);
    auto vs = v.narrow(0, r, len).transpose(0, 1).unsqueeze(0);
    auto o = at::scaled_dot_product_attention(qs, ks, vs, {}, 0.0, /*is_causal=*/true, scale,
                                              /*enable_gqa=*/kv_heads_ != heads_);
    out.narrow(0, r, len).copy_(o[0].transpose(0, 1));
  }
  if (plan.paged == 0) return out;
  const auto& kc = cache.keys(layer);
  const auto& vc = cache.values(layer);
  if (plan.all_paged) {
    cuda::paged_attention(q, out, kc, vc, plan.block_tables, plan.seq, plan.context, scale, plan.max_context);
    return out;
  }
  auto part = at::empty({plan.paged, heads_, head_dim_}, q.options());
  cuda::paged_attention(q.index_select(0, plan.paged_rows), part, kc, vc, plan.block_tables, plan.seq, plan.context,
                        scale, plan.max_context);
  out.index_copy_(0, plan.paged_rows, part);
  return out;
}

at::Tensor LlamaCudaInference::forward(const inference::ModelInput& in, inference::PagedKVCache& cache) {
  c10::InferenceMode guard;
  const auto device = options_.device;
  const int64_t n = in.tokens.size(0), H = heads_, KV = kv_heads_, D = head_dim_;
  const double eps = config_.rms_norm_eps;
  COLOSSAL_CHECK(cache.shape().device == device && cache.shape().dtype == options_.dtype, "[llama] the KV cache is ",
                 cache.shape().dtype, " on ", cache.shape().device, ", the model wants ", options_.dtype, " on ",
                 device);
  COLOSSAL_CHECK(in.positions.max().item<int64_t>() < cos_.size(0), "[llama] position beyond max_position_embeddings ",
                 config_.max_position_embeddings);
  auto tokens = in.tokens.to(device, /*non_blocking=*/true);
  auto positions = in.positions.to(device, true);
  auto slots = in.attention.slots.to(device, true);
  auto sample = in.sample_index.to(device, true);
  const AttentionPlan plan = plan_attention(in);

  auto h = embed_.index_select(0, tokens);  // [n, hidden]
  for (size_t li = 0; li < layers_.size(); ++li) {
    const auto& L = layers_[li];
    const auto layer = static_cast<int64_t>(li);
    auto x = std::get<0>(cuda::rms_norm_forward(h, L.input_norm, eps));
    auto qkv = L.qkv_bias.defined() ? at::addmm(L.qkv_bias, x, L.qkv.t()) : at::mm(x, L.qkv.t());
    auto q_in = qkv.narrow(1, 0, H * D), k_in = qkv.narrow(1, H * D, KV * D);
    if (L.q_norm.defined()) {  // Qwen3: each head normalised (rows of D) before the rotation
      q_in = std::get<0>(cuda::rms_norm_forward(q_in.reshape({n * H, D}), L.q_norm, eps)).view({n, H * D});
      k_in = std::get<0>(cuda::rms_norm_forward(k_in.reshape({n * KV, D}), L.k_norm, eps)).view({n, KV * D});
    }
    auto q = cuda::rope(q_in.view({1, n, H, D}), cos_, sin_, positions, false).view({n, H, D});
    auto k = cuda::rope(k_in.view({1, n, KV, D}), cos_, sin_, positions, false).view({n, KV, D});
    auto v = qkv.narrow(1, (H + KV) * D, KV * D).reshape({n, KV, D});
    auto& kc = cache.keys(layer);
    auto& vc = cache.values(layer);
    kc.view({-1, KV, D}).index_copy_(0, slots, k);
    vc.view({-1, KV, D}).index_copy_(0, slots, v);
    auto attn = attention(plan, q, k, v, cache, layer).view({n, H * D});
    h = L.o_bias.defined() ? at::addmm(h + L.o_bias, attn, L.o.t()) : at::addmm(h, attn, L.o.t());
    x = std::get<0>(cuda::rms_norm_forward(h, L.post_norm, eps));
    auto gu = at::mm(x, L.gate_up.t());
    const int64_t f = gu.size(1) / 2;
    auto act = cuda::swiglu_forward(gu.narrow(1, 0, f), gu.narrow(1, f, f));
    h = at::addmm(h, act, L.down.t());
  }
  auto last = std::get<0>(cuda::rms_norm_forward(h.index_select(0, sample), norm_, eps));
  return at::mm(last, lm_head_.t()).to(at::kFloat).to(c10::kCPU);
}

}  // namespace colossal::llama
