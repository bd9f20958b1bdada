#include "llama/inference.h"

#include <torch/torch.h>

#include <cmath>

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "core/checkpoint/safetensors.h"
#include "core/common/check.h"
#include "core/common/fs.h"
#include "core/dist/collectives.h"
#include "core/parallel/tensor/layers.h"
#include "core/inference/kv_cache.h"
#include "llama/pretrained.h"

namespace colossal::llama {

namespace {

using inference::PackedLinear;

// Names, sizes and modification times of a checkpoint's weight files: a packed file made from
// other weights is not reused.
std::string checkpoint_signature(const std::string& dir) {
  std::string sig;
  auto names = fs::list_dir(dir);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) {
    if (n.rfind("packed-", 0) == 0) continue;
    auto ends = [&](const std::string& tail) {
      return n.size() >= tail.size() && n.compare(n.size() - tail.size(), tail.size(), tail) == 0;
    };
    if (!ends(".safetensors") && !ends(".json")) continue;
    struct stat st {};
    if (::stat((dir + "/" + n).c_str(), &st) != 0) continue;
    sig += n + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
           std::to_string(st.st_mtim.tv_nsec) + ";";
  }
  return sig;
}
using inference::WeightFormat;
constexpr int64_t kRowGrain = 4;  // rows per task in the elementwise loops (a prompt splits, a token does not)

// out[r] = w * x[r] / sqrt(mean(x[r]^2) + eps), rows of `dim` floats.
void rms_norm_rows(const float* x, const float* w, float* out, int64_t rows, int64_t dim, double eps) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* in = x + r * dim;
      float* o = out + r * dim;
      float ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += in[i] * in[i];
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + static_cast<float>(eps));
      for (int64_t i = 0; i < dim; ++i) o[i] = w[i] * (in[i] * inv);
    }
  });
}

// out[r] = w * (x[r] - mean) / sqrt(var + eps) + b (GPT-2's LayerNorm).
void layer_norm_rows(const float* x, const float* w, const float* bias, float* out, int64_t rows, int64_t dim,
                     double eps) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* in = x + r * dim;
      float* o = out + r * dim;
      float sum = 0;
      for (int64_t i = 0; i < dim; ++i) sum += in[i];
      const float mean = sum / static_cast<float>(dim);
      float ss = 0;
      for (int64_t i = 0; i < dim; ++i) ss += (in[i] - mean) * (in[i] - mean);
      const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + static_cast<float>(eps));
      for (int64_t i = 0; i < dim; ++i) o[i] = w[i] * ((in[i] - mean) * inv) + bias[i];
    }
  });
}

// LLaMA's rotary embedding (rotate-half layout) of `heads` heads of row r of `src` into `dst`
// (in place when equal): the cos/sin tables' row is the token's position.
void rope_rows(const float* src, int64_t src_stride, float* dst, int64_t dst_stride, int64_t rows, int64_t heads,
               int64_t d, const int64_t* positions, const float* cos, const float* sin) {
  const int64_t half = d / 2;
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* c = cos + positions[r] * d;
      const float* s = sin + positions[r] * d;
      for (int64_t h = 0; h < heads; ++h) {
        const float* x = src + r * src_stride + h * d;
        float* y = dst + r * dst_stride + h * d;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = x[i], x2 = x[i + half];
          y[i] = x1 * c[i] - x2 * s[i];
          y[i + half] = x2 * c[i + half] + x1 * s[i + half];
        }
      }
    }
  });
}

// act[r] = silu(gate_up[r, :ffn]) * gate_up[r, ffn:].
void silu_mul_rows(const float* gate_up, float* act, int64_t rows, int64_t ffn) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate_up + r * 2 * ffn;
      float* o = act + r * ffn;
      for (int64_t i = 0; i < ffn; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * g[ffn + i];
    }
  });
}

// gelu(x): the tanh approximation (gelu_pytorch_tanh, GPT-2's gelu_new) or the exact erf form.
inline float gelu(float x, bool tanh_form) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f, kInvSqrt2 = 0.7071067811865476f;
  return x * (tanh_form ? 0.5f * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)))
                        : 0.5f * (1.0f + std::erf(x * kInvSqrt2)));
}

// x[r] = gelu(x[r]) in place (GPT-2's ungated MLP).
void gelu_rows(float* x, int64_t rows, int64_t dim, bool tanh_form) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b * dim; i < e * dim; ++i) x[i] = gelu(x[i], tanh_form);
  });
}

// act[r] = gelu(gate_up[r, :ffn]) * gate_up[r, ffn:] (Gemma's GeGLU).
void gelu_mul_rows(const float* gate_up, float* act, int64_t rows, int64_t ffn, bool tanh_form) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate_up + r * 2 * ffn;
      float* o = act + r * ffn;
      for (int64_t i = 0; i < ffn; ++i) o[i] = gelu(g[i], tanh_form) * g[ffn + i];
    }
  });
}

// Qwen3's per-head RMSNorm of q or k, in place on [n, heads, head_dim] (a view into the qkv rows).
void head_norm(at::Tensor x, const at::Tensor& weight, double eps) {
  x.copy_(x * at::rsqrt(x.square().mean(-1, /*keepdim=*/true) + eps) * weight);
}

void add_rows(float* h, const float* x, int64_t rows, int64_t dim, const float* bias = nullptr) {
  at::parallel_for(0, rows, kRowGrain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      for (int64_t i = 0; i < dim; ++i) h[r * dim + i] += x[r * dim + i] + (bias ? bias[i] : 0.0f);
  });
}

// A fresh prompt shorter than this attends through the paged kernel like any other chunk.
constexpr int64_t kFusedPrefillMin = 8;

void check_kv_cache(const LlamaInference::Options& o) {
  COLOSSAL_CHECK(!o.kv_cache || *o.kv_cache == at::kFloat || *o.kv_cache == at::kBFloat16 || *o.kv_cache == at::kChar,
                 "[llama] KV cache dtype: expected float32, bfloat16 or int8 (q8_0), got ", *o.kv_cache);
}

}  // namespace

LlamaInference::Options LlamaInference::Options::named(const std::string& name) {
  Options o;
  o.weights = kernels::cpu::weight_format(name);
  o.dtype = *o.weights == WeightFormat::kF32 ? at::kFloat : at::kBFloat16;
  return o;
}

inference::WeightFormat LlamaInference::Options::weight_format() const {
  if (weights) return *weights;
  return dtype == at::kBFloat16 ? WeightFormat::kBF16 : WeightFormat::kF32;
}

LlamaInference::LlamaInference(LlamaForCausalLM& model, Options options, const PackedMatrices* packed)
    : config_(model->config()), options_(options), parallel_(model->parallel_context()) {
  COLOSSAL_CHECK(options.dtype == at::kFloat || options.dtype == at::kBFloat16,
                 "[llama] inference dtype (the KV cache's) must be float32 or bfloat16, got ", options.dtype);
  check_kv_cache(options);
  torch::NoGradGuard no_grad;
  const auto format = options_.weight_format();
  auto pack_named = [&](const std::string& name, const at::Tensor& t) {
    if (packed) {
      auto it = packed->find(name);
      if (it != packed->end() && it->second.format() == format && it->second.out_features() == t.size(0) &&
          it->second.in_features() == t.size(1))
        return it->second;
    }
    return PackedLinear(t, format);
  };
  auto fp32 = [](const at::Tensor& t) { return t.detach().to(at::kFloat).contiguous(); };
  // Gemma's norms scale by (1 + w): folded once here.
  auto norm_weight = [&](const at::Tensor& t) { return config_.norm_plus_one ? fp32(t) + 1.0 : fp32(t); };
  const int64_t d = config_.resolved_head_dim(), kv = config_.num_key_value_heads;
  const int tp = parallel_.tp_size();
  heads_ = config_.num_attention_heads / tp;
  // Fewer kv heads than tp: the model keeps them whole; this rank's queries read only one.
  kv_whole_ = tp > 1 && kv < tp;
  kv_heads_ = kv_whole_ ? 1 : kv / tp;
  kv_select_ = kv_whole_ ? parallel_.tp_rank() * heads_ / (config_.num_attention_heads / kv) : 0;
  auto kv_rows = [&](const at::Tensor& t) { return kv_whole_ ? t.narrow(0, kv_select_ * d, d) : t; };
  for (auto& l : model->model->layers) {
    Layer x;
    const std::string prefix = "layers." + std::to_string(layers_.size()) + ".";
    auto pack = [&](const char* name, const at::Tensor& t) { return pack_named(prefix + name, t); };
    auto& a = l->self_attn;
    x.qkv = pack("qkv", at::cat({a->q_proj->weight, kv_rows(a->k_proj->weight), kv_rows(a->v_proj->weight)}, 0));
    if (config_.q_k_v_bias())
      x.qkv_bias = fp32(at::cat({a->q_proj->bias, kv_rows(a->k_proj->bias), kv_rows(a->v_proj->bias)}, 0));
    if (config_.attention_bias) x.o_bias = fp32(a->o_proj->bias);  // added once, after the reduction
    if (a->q_norm) {
      x.q_norm = norm_weight(a->q_norm->weight);
      x.k_norm = norm_weight(a->k_norm->weight);
    }
    x.o = pack("o", a->o_proj->weight);
    if (l->block_sparse_moe) {
      const auto& moe = l->block_sparse_moe;
      COLOSSAL_CHECK(moe->placement().ep_size() == 1, "[llama] inference holds every expert on each process (ep 1)");
      x.router = fp32(moe->gate->weight);
      for (auto& e : moe->experts) {
        const std::string ex = "experts." + std::to_string(x.expert_down.size()) + ".";
        x.expert_gate_up.push_back(pack((ex + "gate_up").c_str(), at::cat({e->w1->weight, e->w3->weight}, 0)));
        x.expert_down.push_back(pack((ex + "down").c_str(), e->w2->weight));
      }
      router_ = moe->router();
    } else if (!l->mlp->gate_proj) {  // GPT-2: up, activation, down, with biases
      x.gate_up = pack("gate_up", l->mlp->up_proj->weight);
      x.down = pack("down", l->mlp->down_proj->weight);
      if (l->mlp->up_proj->bias.defined()) x.up_bias = fp32(l->mlp->up_proj->bias);
      if (l->mlp->down_proj->bias.defined()) x.down_bias = fp32(l->mlp->down_proj->bias);  // after the reduction
    } else {
      x.gate_up = pack("gate_up", at::cat({l->mlp->gate_proj->weight, l->mlp->up_proj->weight}, 0));
      x.down = pack("down", l->mlp->down_proj->weight);
    }
    x.input_norm = norm_weight(l->input_layernorm->weight);
    x.post_norm = norm_weight(l->post_attention_layernorm->weight);
    if (l->input_layernorm->bias.defined()) {
      x.input_norm_bias = fp32(l->input_layernorm->bias);
      x.post_norm_bias = fp32(l->post_attention_layernorm->bias);
    }
    if (l->pre_feedforward_layernorm) {
      x.pre_ff_norm = norm_weight(l->pre_feedforward_layernorm->weight);
      x.post_ff_norm = norm_weight(l->post_feedforward_layernorm->weight);
    }
    layers_.push_back(std::move(x));
  }
  embed_ = pack_named("embed", model->model->embed_tokens->weight);
  vocab_start_ = parallel_.tp_rank() * embed_.out_features();
  norm_ = norm_weight(model->model->norm->weight);
  if (model->model->norm->bias.defined()) norm_bias_ = fp32(model->model->norm->bias);
  if (model->model->embed_positions) positions_ = fp32(model->model->embed_positions->weight);
  lm_head_ = model->lm_head ? pack_named("lm_head", model->lm_head->weight) : embed_;
  make_tables();
}

int64_t LlamaInference::add_adapter(LlamaForCausalLM& adapted) {
  torch::NoGradGuard no_grad;
  auto& blocks = adapted->model->layers;
  COLOSSAL_CHECK(blocks.size() == layers_.size(), "[lora] serving: the adapted model has ", blocks.size(),
                 " layers, the engine's ", layers_.size());
  const int64_t id = adapters_ + 1, d = config_.resolved_head_dim();
  int64_t pieces = 0;
  // One projection's update into columns [offset, ...) of a packed matrix (k/v: the rows this
  // rank's fused matrix keeps when the kv heads are whole).
  auto add = [&](inference::MatrixAdapters& to, const parallel::ParallelLinear& l, int64_t offset, bool kv = false) {
    if (!l || !l->has_lora()) return;
    auto b = l->lora_B->weight * l->lora_scaling();
    to.add(id, l->lora_A->weight, kv && kv_whole_ ? b.narrow(0, kv_select_ * d, d) : b, offset);
    ++pieces;
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto& l = blocks[i];
    auto& x = layers_[i];
    auto& a = l->self_attn;
    add(x.qkv_lora, a->q_proj, 0);
    add(x.qkv_lora, a->k_proj, heads_ * d, true);
    add(x.qkv_lora, a->v_proj, (heads_ + kv_heads_) * d, true);
    add(x.o_lora, a->o_proj, 0);
    if (l->block_sparse_moe) {
      for (auto& e : l->block_sparse_moe->experts)
        COLOSSAL_CHECK(!e->w1->has_lora() && !e->w2->has_lora() && !e->w3->has_lora(), "[lora] serving: layer ", i,
                       " has adapters on its experts; several adapters at once cover attention and dense MLP layers "
                       "(serve this one alone with --lora DIR: it is folded into the weights)");
      continue;
    }
    const int64_t ffn = config_.intermediate_size / parallel_.tp_size();
    if (l->mlp->gate_proj) add(x.gate_up_lora, l->mlp->gate_proj, 0);
    add(x.gate_up_lora, l->mlp->up_proj, l->mlp->gate_proj ? ffn : 0);
    add(x.down_lora, l->mlp->down_proj, 0);
  }
  COLOSSAL_CHECK(pieces > 0, "[lora] serving: the model given has no adapter on any linear layer");
  return adapters_ = id;
}

LlamaInference::LlamaInference(const LlamaConfig& config, Options options)
    : config_(config), options_(options), heads_(config.num_attention_heads), kv_heads_(config.num_key_value_heads) {
  COLOSSAL_CHECK(options.dtype == at::kFloat || options.dtype == at::kBFloat16,
                 "[llama] inference dtype (the KV cache's) must be float32 or bfloat16, got ", options.dtype);
  check_kv_cache(options);
  make_tables();
}

void LlamaInference::make_tables() {
  auto tables = RotaryTables::make(config_, config_.max_position_embeddings);
  cos_ = tables.cos.contiguous();
  sin_ = tables.sin.contiguous();
}

int64_t LlamaInference::weight_bytes_per_token() const {
  int64_t bytes = lm_head_.bytes();
  for (const auto& l : layers_) {
    bytes += l.qkv.bytes() + l.o.bytes();
    if (l.router.defined()) {
      // A token reads the experts it is routed to.
      bytes += router_.top_k * (l.expert_gate_up[0].bytes() + l.expert_down[0].bytes()) + l.router.numel() * 4;
    } else {
      bytes += l.gate_up.bytes() + l.down.bytes();
    }
  }
  return bytes;
}

std::shared_ptr<LlamaInference> LlamaInference::load(const std::string& dir, Options options,
                                                     const parallel::ParallelContext& parallel) {
  auto loaded = load_pretrained(dir, {}, parallel);
  const auto format = options.weight_format();
  if (!kernels::cpu::is_quantized(format) || !options.reuse_packed || parallel.tensor_parallel())
    return std::make_shared<LlamaInference>(loaded.model, options);
  // Quantized once: the packed matrices are kept beside the checkpoint, keyed by its files.
  const std::string file = dir + "/packed-" + kernels::cpu::to_string(format) + ".safetensors";
  const std::string signature = checkpoint_signature(dir);
  auto packed = load_packed(file, format, signature);
  auto model = std::make_shared<LlamaInference>(loaded.model, options, &packed);
  if (packed.empty()) {
    try {
      model->save_packed(file, signature);
    } catch (const std::exception& e) {  // a read-only model directory: quantize at every start
      std::fprintf(stderr, "[llama] could not keep the %s matrices in %s (%s); they are quantized again next time\n",
                   kernels::cpu::to_string(format), file.c_str(), error_text(e).c_str());
    }
  }
  return model;
}

at::Tensor LlamaInference::logits(const std::vector<int64_t>& ids, int64_t chunk) {
  const auto n = static_cast<int64_t>(ids.size());
  COLOSSAL_CHECK(n >= 1 && n <= config_.max_position_embeddings, "[llama] logits: ", n,
                 " tokens (expected 1..max_position_embeddings = ", config_.max_position_embeddings, ")");
  for (auto t : ids)
    COLOSSAL_CHECK(t >= 0 && t < config_.vocab_size, "[llama] logits: token ", t, " outside the vocabulary");
  inference::KVCacheOptions o;
  o.block_size = 16;
  o.num_blocks = (n + o.block_size - 1) / o.block_size;
  inference::PagedKVCache cache(cache_shape(), o);
  const int64_t step = chunk > 0 ? chunk : n;
  auto all = at::tensor(ids, at::kLong);
  std::vector<at::Tensor> out;
  for (int64_t start = 0; start < n; start += step) {
    const int64_t len = std::min(step, n - start);
    inference::ModelInput in;
    in.tokens = all.narrow(0, start, len).contiguous();
    in.positions = at::arange(start, start + len, at::kLong);
    in.attention.block_tables = at::arange(o.num_blocks, at::kInt).view({1, o.num_blocks});
    in.attention.token_seq = at::zeros({len}, at::kInt);
    in.attention.token_context = at::arange(start + 1, start + len + 1, at::kInt);
    in.attention.slots = in.positions.clone();  // block b holds positions [16b, 16b + 16)
    in.sample_index = at::arange(len, at::kLong);
    out.push_back(forward(in, cache));
  }
  return out.size() == 1 ? out[0] : at::cat(out, 0);
}

LlamaInference::PackedMatrices LlamaInference::packed_matrices() const {
  PackedMatrices out;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    out[p + "qkv"] = l.qkv;
    out[p + "o"] = l.o;
    if (l.gate_up.defined()) out[p + "gate_up"] = l.gate_up;
    if (l.down.defined()) out[p + "down"] = l.down;
    for (size_t e = 0; e < l.expert_down.size(); ++e) {
      out[p + "experts." + std::to_string(e) + ".gate_up"] = l.expert_gate_up[e];
      out[p + "experts." + std::to_string(e) + ".down"] = l.expert_down[e];
    }
  }
  out["embed"] = embed_;
  if (lm_head_.data().data_ptr() != embed_.data().data_ptr()) out["lm_head"] = lm_head_;
  return out;
}

void LlamaInference::save_packed(const std::string& file, const std::string& signature) const {
  checkpoint::NamedTensors tensors;
  std::map<std::string, std::string> meta = {{"format", "colossal-packed-linear"},
                                             {"weights", kernels::cpu::to_string(options_.weight_format())},
                                             {"signature", signature}};
  for (const auto& [name, m] : packed_matrices()) {
    tensors.emplace_back(name + ".data", m.data());
    if (m.scales().defined()) tensors.emplace_back(name + ".scales", m.scales());
    meta[name + ".shape"] = std::to_string(m.out_features()) + "," + std::to_string(m.in_features());
  }
  checkpoint::save_safetensors(file, tensors, meta);
}

LlamaInference::PackedMatrices LlamaInference::load_packed(const std::string& file, WeightFormat format,
                                                           const std::string& signature) {
  PackedMatrices out;
  if (::access(file.c_str(), R_OK) != 0) return out;
  auto f = checkpoint::SafetensorsFile::open(file);
  const auto& meta = f->metadata();
  auto get = [&](const std::string& k) {
    auto it = meta.find(k);
    return it == meta.end() ? std::string() : it->second;
  };
  if (get("format") != "colossal-packed-linear" || get("weights") != kernels::cpu::to_string(format) ||
      get("signature") != signature)
    return out;  // another format, or the checkpoint changed since: packed again (and rewritten)
  for (const auto& t : f->tensors()) {
    const std::string suffix = ".data";
    if (t.name.size() <= suffix.size() || t.name.compare(t.name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const std::string name = t.name.substr(0, t.name.size() - suffix.size());
    const std::string shape = get(name + ".shape");
    const auto comma = shape.find(',');
    COLOSSAL_CHECK(comma != std::string::npos, "[llama] ", file, ": no shape recorded for ", name);
    out[name] = PackedLinear(format, std::stoll(shape.substr(0, comma)), std::stoll(shape.substr(comma + 1)),
                             f->view(t.name), f->find(name + ".scales") ? f->view(name + ".scales") : at::Tensor());
  }
  return out;
}

void LlamaInference::norm_rows(const float* x, const at::Tensor& weight, const at::Tensor& bias, float* out,
                               int64_t rows) const {
  if (bias.defined())
    layer_norm_rows(x, weight.const_data_ptr<float>(), bias.const_data_ptr<float>(), out, rows, config_.hidden_size,
                    config_.rms_norm_eps);
  else
    rms_norm_rows(x, weight.const_data_ptr<float>(), out, rows, config_.hidden_size, config_.rms_norm_eps);
}

inference::CacheShape LlamaInference::cache_shape() const {
  return {config_.num_hidden_layers, kv_heads_, config_.resolved_head_dim(),
          options_.kv_cache.value_or(options_.dtype)};
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
  auto routing = parallel::expert::route(at::linear(x, L.router), router_);
  parallel::expert::LocalExperts experts;
  experts.run = [&](int64_t e, const at::Tensor& rows) {
    auto gu = L.expert_gate_up[static_cast<size_t>(e)].forward(rows);
    auto act = at::empty({gu.size(0), ffn}, at::kFloat);
    silu_mul_rows(gu.data_ptr<float>(), act.data_ptr<float>(), gu.size(0), ffn);
    return L.expert_down[static_cast<size_t>(e)].forward(act);
  };
  if (parallel_.tensor_parallel()) experts.finish = [&](const at::Tensor& out) { return all_reduced(out); };
  parallel::expert::ExpertPlacement every;  // inference holds every expert
  every.num_experts = router_.num_experts;
  return parallel::expert::dispatch_and_combine(x, routing, every, experts);
}

LlamaInference::Buffers& LlamaInference::buffers(int64_t n) {
  auto& b = buffers_;
  if (n <= b.capacity) return b;
  const int64_t d = config_.resolved_head_dim(), hidden = config_.hidden_size;
  const int64_t ffn = config_.intermediate_size / parallel_.tp_size();
  auto f = at::TensorOptions().dtype(at::kFloat);
  b.capacity = n;
  b.h = at::empty({n, hidden}, f);
  b.normed = at::empty({n, hidden}, f);
  b.qkv = at::empty({n, (heads_ + 2 * kv_heads_) * d}, f);
  b.attn = at::empty({2, n, heads_ * d}, f);  // [0]: the rotated queries, [1]: attention's output
  b.out = at::empty({n, hidden}, f);
  b.gate_up = at::empty({n, 2 * ffn}, f);
  b.act = at::empty({n, ffn}, f);
  return b;
}

// Rotated queries in attn[0], output in attn[1]. A sequence's fresh prompt (its chunk starts at
// position 0) runs through ATen's fused causal SDPA on this step's keys and values; the other
// tokens read the paged cache.
void LlamaInference::attention(const inference::ModelInput& in, inference::PagedKVCache& cache, int64_t layer,
                               int64_t n) {
  auto& b = buffers_;
  const int64_t d = config_.resolved_head_dim(), heads = heads_, kv = kv_heads_;
  const double scale = config_.attention_scale(), cap = config_.attn_logit_softcapping;
  const int64_t w = config_.layer_window(layer);
  const float* q = b.attn[0].data_ptr<float>();
  float* out = b.attn[1].data_ptr<float>();
  const int32_t* seq = in.attention.token_seq.const_data_ptr<int32_t>();
  const int64_t* pos = in.positions.const_data_ptr<int64_t>();
  int64_t r = 0;
  while (r < n) {
    int64_t e = r + 1;
    while (e < n && seq[e] == seq[r]) ++e;
    if (pos[r] == 0 && e - r >= kFusedPrefillMin) {
      const int64_t len = e - r;
      auto rows = b.qkv.narrow(0, r, len);
      auto qs = b.attn[0].narrow(0, r, len).view({1, len, heads, d}).transpose(1, 2);
      auto ks = rows.narrow(1, heads * d, kv * d).view({1, len, kv, d}).transpose(1, 2);
      auto vs = rows.narrow(1, (heads + kv) * d, kv * d).view({1, len, kv, d}).transpose(1, 2);
      // Causal, within the sliding window when the prompt is longer than it.
      auto i = at::arange(len, at::kLong).unsqueeze(1), j = at::arange(len, at::kLong).unsqueeze(0);
      std::optional<at::Tensor> mask;
      if (w > 0 && len > w) mask = (j <= i).logical_and(j > i - w);
      at::Tensor o;
      if (cap > 0) {  // Gemma 2's soft-capped scores: no fused kernel has the hook, so spelled out
        auto kk = kv != heads ? ks.repeat_interleave(heads / kv, 1) : ks;
        auto vv = kv != heads ? vs.repeat_interleave(heads / kv, 1) : vs;
        auto scores = at::tanh(at::matmul(qs, kk.transpose(-1, -2)) * (scale / cap)) * cap;
        scores.masked_fill_(mask ? mask->logical_not() : j > i, -std::numeric_limits<float>::infinity());
        o = at::matmul(at::softmax(scores, -1), vv);
      } else {
        o = at::scaled_dot_product_attention(qs, ks, vs, mask, 0.0, /*is_causal=*/!mask.has_value(), scale,
                                             /*enable_gqa=*/kv != heads);
      }
      b.attn[1].narrow(0, r, len).view({len, heads, d}).copy_(o[0].transpose(0, 1));
    } else {
      inference::paged_attention_rows(q, out, heads, cache, layer, in.attention, scale, r, e, w, cap);
    }
    r = e;
  }
}

at::Tensor LlamaInference::forward(const inference::ModelInput& in, inference::PagedKVCache& cache) {
  c10::InferenceMode guard;
  const int64_t n = in.tokens.size(0), heads = heads_, kv = kv_heads_, hidden = config_.hidden_size;
  const int64_t d = config_.resolved_head_dim(), ffn = config_.intermediate_size / parallel_.tp_size();
  const double eps = config_.rms_norm_eps;
  COLOSSAL_CHECK(in.positions.is_contiguous() && in.attention.slots.is_contiguous() && in.tokens.is_contiguous(),
                 "[llama] model input must be contiguous");
  COLOSSAL_CHECK(in.positions.max().item<int64_t>() < cos_.size(0), "[llama] position beyond max_position_embeddings ",
                 config_.max_position_embeddings);
  auto& b = buffers(n);
  auto h = b.h.narrow(0, 0, n);
  const auto adapter_rows = inference::AdapterRows::of(in.adapters);  // multi-LoRA: tokens by adapter
  if (parallel_.tensor_parallel()) {
    // This rank's slice of the vocabulary: rows it does not hold contribute zeros to the sum.
    auto local = in.tokens - vocab_start_;
    auto held = (local >= 0).logical_and(local < embed_.out_features());
    auto part = embed_.rows(local.clamp(0, embed_.out_features() - 1)) * held.unsqueeze(1).to(at::kFloat);
    h.copy_(all_reduced(part));
  } else {
    h.copy_(embed_.rows(in.tokens));
  }
  if (config_.scale_embeddings) h.mul_(static_cast<float>(std::sqrt(static_cast<double>(hidden))));
  if (positions_.defined()) h.add_(positions_.index_select(0, in.positions));
  float* hp = h.data_ptr<float>();
  float* normed = b.normed.data_ptr<float>();
  const int64_t width = b.qkv.size(1);
  const int64_t* positions = in.positions.const_data_ptr<int64_t>();
  const float* cos = cos_.const_data_ptr<float>();
  const float* sin = sin_.const_data_ptr<float>();
  for (size_t li = 0; li < layers_.size(); ++li) {
    const auto& L = layers_[li];
    const auto layer = static_cast<int64_t>(li);
    norm_rows(hp, L.input_norm, L.input_norm_bias, normed, n);
    float* qkv = b.qkv.data_ptr<float>();
    L.qkv.forward_into(normed, n, qkv, width);
    L.qkv_lora.apply(b.normed.narrow(0, 0, n), b.qkv.narrow(0, 0, n), adapter_rows);
    if (L.qkv_bias.defined()) b.qkv.narrow(0, 0, n).add_(L.qkv_bias);
    if (L.q_norm.defined()) {
      auto rows = b.qkv.narrow(0, 0, n);
      head_norm(rows.narrow(1, 0, heads * d).view({n, heads, d}), L.q_norm, eps);
      head_norm(rows.narrow(1, heads * d, kv * d).view({n, kv, d}), L.k_norm, eps);
    }
    if (positions_.defined()) {  // GPT-2: positions are in the embeddings; q as it is
      b.attn[0].narrow(0, 0, n).copy_(b.qkv.narrow(0, 0, n).narrow(1, 0, heads * d));
    } else {
      rope_rows(qkv, width, b.attn[0].data_ptr<float>(), heads * d, n, heads, d, positions, cos, sin);
      rope_rows(qkv + heads * d, width, qkv + heads * d, width, n, kv, d, positions, cos, sin);
    }
    cache.write_rows(layer, in.attention.slots.const_data_ptr<int64_t>(), n, qkv + heads * d,
                     qkv + (heads + kv) * d, width);
    attention(in, cache, layer, n);
    auto o = b.out.narrow(0, 0, n);
    L.o.forward_into(b.attn[1].data_ptr<float>(), n, o.data_ptr<float>(), hidden);
    L.o_lora.apply(b.attn[1].narrow(0, 0, n), o, adapter_rows);  // partial under tp, as the base is
    o = all_reduced(o);
    if (L.pre_ff_norm.defined()) {  // Gemma 2: the attention's output normalised before it is added
      if (L.o_bias.defined()) o.add_(L.o_bias);
      float* op = o.data_ptr<float>();
      rms_norm_rows(op, L.post_norm.const_data_ptr<float>(), op, n, hidden, eps);
      add_rows(hp, op, n, hidden);
      rms_norm_rows(hp, L.pre_ff_norm.const_data_ptr<float>(), normed, n, hidden, eps);
    } else {
      add_rows(hp, o.data_ptr<float>(), n, hidden, L.o_bias.defined() ? L.o_bias.const_data_ptr<float>() : nullptr);
      norm_rows(hp, L.post_norm, L.post_norm_bias, normed, n);
    }
    if (L.router.defined()) {
      h.add_(mixture_of_experts(b.normed.narrow(0, 0, n), L, ffn));
      continue;
    }
    float* gu = b.gate_up.data_ptr<float>();
    const bool tanh_gelu = config_.hidden_act == "gelu_pytorch_tanh";
    if (!config_.gated_mlp) {  // GPT-2: gelu(up x + b)
      float* act = b.act.data_ptr<float>();
      L.gate_up.forward_into(normed, n, act, ffn);
      L.gate_up_lora.apply(b.normed.narrow(0, 0, n), b.act.narrow(0, 0, n), adapter_rows);
      if (L.up_bias.defined()) b.act.narrow(0, 0, n).add_(L.up_bias);
      gelu_rows(act, n, ffn, tanh_gelu);
    } else {
      L.gate_up.forward_into(normed, n, gu, 2 * ffn);
      L.gate_up_lora.apply(b.normed.narrow(0, 0, n), b.gate_up.narrow(0, 0, n), adapter_rows);
      if (config_.hidden_act == "silu") silu_mul_rows(gu, b.act.data_ptr<float>(), n, ffn);
      else gelu_mul_rows(gu, b.act.data_ptr<float>(), n, ffn, tanh_gelu);
    }
    auto down = b.out.narrow(0, 0, n);
    L.down.forward_into(b.act.data_ptr<float>(), n, down.data_ptr<float>(), hidden);
    L.down_lora.apply(b.act.narrow(0, 0, n), down, adapter_rows);
    down = all_reduced(down);
    if (L.down_bias.defined()) down.add_(L.down_bias);
    if (L.post_ff_norm.defined()) {
      float* dp = down.data_ptr<float>();
      rms_norm_rows(dp, L.post_ff_norm.const_data_ptr<float>(), dp, n, hidden, eps);
    }
    add_rows(hp, down.data_ptr<float>(), n, hidden);
  }
  auto last = h.index_select(0, in.sample_index).contiguous();
  const int64_t s = last.size(0);
  norm_rows(last.data_ptr<float>(), norm_, norm_bias_, last.data_ptr<float>(), s);
  auto logits = lm_head_.forward(last);  // [S, vocab / tp] fp32
  if (const double cap = config_.final_logit_softcapping; cap > 0) logits = at::tanh(logits / cap) * cap;
  if (!parallel_.tensor_parallel()) return logits;
  // Every rank's vocabulary slice, in rank order; the padding sits at the end.
  const int tp = parallel_.tp_size();
  auto all = at::empty({tp * logits.size(0), logits.size(1)}, logits.options());
  dist::all_gather(all, logits, parallel_.tp);
  return all.view({tp, logits.size(0), logits.size(1)}).permute({1, 0, 2}).reshape({logits.size(0), -1})
      .narrow(1, 0, config_.vocab_size).contiguous();
}

}  // namespace colossal::llama
