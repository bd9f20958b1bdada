#include "vit/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "core/common/check.h"
#include "core/nn/activation_checkpoint.h"
#include "core/nn/module_hooks.h"
#include "core/parallel/tensor/grid/grid_layers.h"
#include "core/parallel/tensor/shard.h"
#include "core/tools/memory_tracer.h"

namespace colossal::vit {

using nn::call;

PatchEmbeddingsImpl::PatchEmbeddingsImpl(const ViTConfig& c) {
  projection = register_module("projection", torch::nn::Conv2d(torch::nn::Conv2dOptions(c.num_channels, c.hidden_size,
                                                                                        c.patch_size)
                                                                   .stride(c.patch_size)));
}

EmbeddingsImpl::EmbeddingsImpl(const ViTConfig& c) : grid_(c.image_size / c.patch_size) {
  cls_token = register_parameter("cls_token", torch::zeros({1, 1, c.hidden_size}));
  position_embeddings = register_parameter("position_embeddings", torch::zeros({1, c.num_patches() + 1, c.hidden_size}));
  patch_embeddings = register_module("patch_embeddings", PatchEmbeddings(c));
}

// Position embeddings for a grid_h x grid_w patch grid: the stored grid, bicubically resized
// when the image size differs from the configured one (the class token's entry unchanged).
torch::Tensor EmbeddingsImpl::positions_for(int64_t grid_h, int64_t grid_w) {
  if (grid_h == grid_ && grid_w == grid_) return position_embeddings;
  const int64_t dim = position_embeddings.size(2);
  auto cls = position_embeddings.narrow(1, 0, 1);
  auto grid = position_embeddings.narrow(1, 1, grid_ * grid_).reshape({1, grid_, grid_, dim}).permute({0, 3, 1, 2});
  auto resized = torch::nn::functional::interpolate(
      grid, torch::nn::functional::InterpolateFuncOptions()
                .size(std::vector<int64_t>{grid_h, grid_w})
                .mode(torch::kBicubic)
                .align_corners(false));
  return torch::cat({cls, resized.permute({0, 2, 3, 1}).reshape({1, grid_h * grid_w, dim})}, 1);
}

torch::Tensor EmbeddingsImpl::forward(const torch::Tensor& pixels) {
  auto patches = call(patch_embeddings->projection, pixels);  // [B, D, gh, gw]
  const int64_t B = patches.size(0), gh = patches.size(2), gw = patches.size(3);
  auto tokens = patches.flatten(2).transpose(1, 2);  // [B, gh*gw, D]
  return nn::run_hooked(*this, [&] {
    return torch::cat({cls_token.expand({B, 1, cls_token.size(2)}), tokens}, 1) + positions_for(gh, gw);
  });
}

SelfAttentionImpl::SelfAttentionImpl(const ViTConfig& c, const BuildContext& where) {
  query = register_module("query", where.at("query").linear(c.hidden_size, c.hidden_size, c.qkv_bias));
  key = register_module("key", where.at("key").linear(c.hidden_size, c.hidden_size, c.qkv_bias));
  value = register_module("value", where.at("value").linear(c.hidden_size, c.hidden_size, c.qkv_bias));
}

DenseImpl::DenseImpl(int64_t in, int64_t out, const BuildContext& where) {
  dense = register_module("dense", where.at("dense").linear(in, out, /*bias=*/true));
}

AttentionImpl::AttentionImpl(const ViTConfig& c, const BuildContext& where) : parallel_(where.parallel) {
  attention = register_module("attention", SelfAttention(c, where.at("attention")));
  output = register_module("output", Dense(c.hidden_size, c.hidden_size, where.at("output")));
  heads_ = attention->query->local_out_features() / (c.hidden_size / c.num_attention_heads);
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x_in) {
  // One gradient all-reduce for query, key and value (the column layers' shared input).
  auto x = parallel::enter_tensor_parallel(x_in, parallel_);
  const int64_t B = x.size(0), N = x.size(1), local = attention->query->local_out_features(), d = local / heads_;
  auto split = [&](const torch::Tensor& t) { return t.view({B, N, heads_, d}).transpose(1, 2); };
  auto q = split(call(attention->query, x)), k = split(call(attention->key, x)), v = split(call(attention->value, x));
  auto out = at::scaled_dot_product_attention(q, k, v);
  return call(output->dense, out.transpose(1, 2).reshape({B, N, local}));  // row-parallel: reduced
}

LayerImpl::LayerImpl(const ViTConfig& c, const BuildContext& where) : parallel_(where.parallel) {
  auto ln = [&] { return parallel::ParallelLayerNorm(c.hidden_size, c.layer_norm_eps, where.parallel); };
  layernorm_before = register_module("layernorm_before", ln());
  attention = register_module("attention", Attention(c, where.at("attention")));
  layernorm_after = register_module("layernorm_after", ln());
  intermediate = register_module("intermediate", Dense(c.hidden_size, c.intermediate_size, where.at("intermediate")));
  output = register_module("output", Dense(c.intermediate_size, c.hidden_size, where.at("output")));
}

torch::Tensor LayerImpl::forward(const torch::Tensor& x) {
  auto h = x + attention->forward(call(layernorm_before, x));
  auto entered = parallel::enter_tensor_parallel(call(layernorm_after, h), parallel_);
  return h + call(output->dense, torch::gelu(call(intermediate->dense, entered)));
}

EncoderImpl::EncoderImpl(const ViTConfig& c, const BuildContext& where) {
  // A container whose children are named by global index: a stage's checkpoint pieces are
  // pieces of the one Hugging Face layout (layer.N.*), whichever layers it holds.
  auto stack = register_module("layer", std::make_shared<torch::nn::Module>("LayerStack"));
  std::vector<int64_t> held;
  for (const auto& [begin, end] : where.parallel.pipeline.layer_ranges(c.num_hidden_layers, stage_costs(c)))
    for (int64_t i = begin; i < end; ++i) held.push_back(i);
  std::sort(held.begin(), held.end());
  for (int64_t i : held) {
    layers.push_back(Layer(c, where.at("layer." + std::to_string(i))));
    layer_ids.push_back(i);
    stack->register_module(std::to_string(i), layers.back());
  }
}

ViTModelImpl::ViTModelImpl(const ViTConfig& c, const BuildContext& where) {
  const auto& pipe = where.parallel.pipeline;
  if (!pipe.enabled() || pipe.holds_first()) embeddings = register_module("embeddings", Embeddings(c));
  encoder = register_module("encoder", Encoder(c, where.at("encoder")));
  if (!pipe.enabled() || pipe.holds_last())
    layernorm =
        register_module("layernorm", parallel::ParallelLayerNorm(c.hidden_size, c.layer_norm_eps, where.parallel));
}

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "vit.encoder.layer.N.<rest>" -> N (and `rest`), else -1.
int64_t encoder_layer(const std::string& name, std::string* rest) {
  static const std::string prefix = "vit.encoder.layer.";
  if (name.rfind(prefix, 0) != 0) return -1;
  size_t dot = name.find('.', prefix.size());
  if (dot == std::string::npos) return -1;
  *rest = name.substr(dot + 1);
  return std::stoll(name.substr(prefix.size(), dot - prefix.size()));
}

}  // namespace

ViTForImageClassificationImpl::ViTForImageClassificationImpl(const ViTConfig& c,
                                                             const parallel::ParallelContext& parallel)
    : config_(c), parallel_(parallel) {
  // First, before any layer draws: eager and deferred construction take the same seed.
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    init_seed_ = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  config_.validate();
  const auto& grid = parallel_.grid;
  check_parallel(config_, grid.parallel() ? grid.size() : parallel_.tp_size(), parallel_.sp_mode, grid.mode(),
                 grid.mode() == dist::TensorParallelMode::k2p5d ? grid.depth() : 1);
  const auto plan = parallel_plan(config_);
  const BuildContext root{plan, parallel_, ""};
  vit = register_module("vit", ViTModel(config_, root.at("vit")));
  const auto& pipe = parallel_.pipeline;
  if (!pipe.enabled() || pipe.holds_last())
    classifier = register_module("classifier", root.at("classifier").linear(c.hidden_size, c.num_labels, true));
  chunk_layers_ = pipe.layer_ranges(config_.num_hidden_layers, stage_costs(config_));
  // LibTorch's convolution and norms make their weights at once: deferred again, so boost()
  // initialises every parameter the same way.
  if (nn::deferred_init_enabled()) nn::defer_parameters(*this);
  else reset_parameters();
}

void ViTForImageClassificationImpl::reset_parameters(const std::function<bool(const std::string&)>& which) {
  torch::NoGradGuard no_grad;
  const auto specs = parallel::collect_shard_specs(*this);
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    if (nn::is_deferred(p) || (which && !which(item.key()))) continue;
    const auto* split = parallel::split_spec(specs, item.key());
    auto full = torch::empty(parallel::full_shape(p, split), torch::kFloat32);
    init_parameter(item.key(), full);
    p.copy_(parallel::local_part(full, split, p));
  }
}

void ViTForImageClassificationImpl::init_parameter(const std::string& name, torch::Tensor& full) const {
  torch::NoGradGuard no_grad;
  if (ends_with(name, "bias")) {
    full.zero_();
    return;
  }
  if (name.find("layernorm") != std::string::npos) {
    full.fill_(1.0);
    return;
  }
  if (sincos_ && name == "vit.embeddings.position_embeddings") {
    const int64_t D = config_.hidden_size, grid = config_.image_size / config_.patch_size, q = D / 4;
    auto omega = 1.0 / torch::pow(10000.0, torch::arange(q, torch::kFloat64) / static_cast<double>(q));
    auto coords = torch::arange(grid, torch::kFloat64);
    auto rows = coords.repeat_interleave(grid).unsqueeze(1) * omega;  // patch p sits at row p / grid
    auto cols = coords.repeat({grid}).unsqueeze(1) * omega;           // and column p % grid
    auto table = torch::cat({rows.sin(), rows.cos(), cols.sin(), cols.cos()}, 1).to(torch::kFloat);
    full.zero_();
    full.narrow(1, 1, grid * grid).narrow(2, 0, 4 * q).copy_(table.unsqueeze(0));
    return;
  }
  std::string rest;
  const int64_t layer = mimetic_ ? encoder_layer(name, &rest) : -1;
  if (layer >= 0) {
    if (rest == "attention.attention.query.weight") return void(full.copy_(mimetic_pair(layer, true).first));
    if (rest == "attention.attention.key.weight") return void(full.copy_(mimetic_pair(layer, true).second));
    if (rest == "attention.output.dense.weight") return void(full.copy_(mimetic_pair(layer, false).first));
    if (rest == "attention.attention.value.weight") return void(full.copy_(mimetic_pair(layer, false).second));
  }
  const double s = config_.initializer_range;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(nn::parameter_seed(init_seed_, name));
  full.normal_(0.0, s, gen).clamp_(-2 * s, 2 * s);
}

void check_parallel(const ViTConfig& c, int tp, parallel::SequenceParallelMode sp_mode,
                    dist::TensorParallelMode tp_mode, int tp_depth) {
  COLOSSAL_CHECK(sp_mode == parallel::SequenceParallelMode::kNone, "[vit] sp_mode ", parallel::to_string(sp_mode),
                 ": ViT has no sequence parallelism (a few hundred patch tokens fit on every rank); use tp or dp");
  if (tp_mode != dist::TensorParallelMode::k1d && tp > 1) {
    const char* mode = dist::to_string(tp_mode);
    const auto grid = dist::tensor_grid_shape(tp_mode, tp, tp_depth);
    COLOSSAL_CHECK(c.num_attention_heads % grid.q == 0, "[vit] tp_mode ", mode, ": num_attention_heads ",
                   c.num_attention_heads, " must divide by the grid's side q = ", grid.q,
                   " (each rank attends with its block of the heads)");
    for (auto [name, width] : {std::pair{"hidden_size", c.hidden_size}, std::pair{"intermediate_size",
                                                                                  c.intermediate_size}})
      COLOSSAL_CHECK(width % grid.weight_out_parts == 0, "[vit] tp_mode ", mode, ": ", name, " ", width,
                     " does not divide into the grid's ", grid.weight_out_parts, " weight blocks");
    return;
  }
  COLOSSAL_CHECK(c.num_attention_heads % tp == 0, "[vit] num_attention_heads ", c.num_attention_heads,
                 " does not divide by tp ", tp);
  COLOSSAL_CHECK(c.intermediate_size % tp == 0, "[vit] intermediate_size ", c.intermediate_size,
                 " does not divide by tp ", tp);
}

void check_parallel(const ViTConfig& c, const dist::ParallelDims& dims) {
  COLOSSAL_CHECK(c.num_hidden_layers >= dims.pp(), "[vit] pp ", dims.pp(), ": the model has ", c.num_hidden_layers,
                 " layers and every pipeline stage needs at least one");
  check_parallel(c, dims.tp(), dims.sp_mode(), dims.tp_mode(), dims.options().tp_depth);
}

parallel::pipeline::StageCosts stage_costs(const ViTConfig& c) {
  const double D = static_cast<double>(c.hidden_size), F = static_cast<double>(c.intermediate_size);
  const double tokens = static_cast<double>(c.num_patches() + 1);
  // Training = 3 x forward; forward = 2 FLOPs per weight per token, plus attention's scores and
  // values (2 x 2 x tokens x D per token).
  const double layer = 3.0 * tokens * (2.0 * (4.0 * D * D + 2.0 * D * F) + 4.0 * tokens * D);
  const double patch = 3.0 * static_cast<double>(c.num_patches()) * 2.0 *
                       static_cast<double>(c.num_channels * c.patch_size * c.patch_size) * D;
  const double head = 3.0 * 2.0 * D * static_cast<double>(c.num_labels);
  return {std::vector<double>(c.num_hidden_layers, layer), patch, head};
}

const std::pair<torch::Tensor, torch::Tensor>& ViTForImageClassificationImpl::mimetic_pair(int64_t layer,
                                                                                         bool query_key) const {
  const std::string key = "vit.encoder.layer." + std::to_string(layer) + (query_key ? ".mimetic.qk" : ".mimetic.ov");
  if (key == mimetic_key_) return mimetic_cache_;
  const int64_t D = config_.hidden_size, H = config_.num_attention_heads, dh = D / H;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(nn::parameter_seed(init_seed_, key));
  auto factored = [&](double alpha, double beta) {  // alpha Z + beta I, factored by SVD
    auto m = alpha * at::randn({D, D}, gen) / std::sqrt(static_cast<double>(D)) + beta * torch::eye(D);
    return at::linalg_svd(m, /*full_matrices=*/false);
  };
  if (query_key) {
    auto wq = torch::empty({D, D}), wk = torch::empty({D, D});
    for (int64_t h = 0; h < H; ++h) {
      auto [u, s, vh] = factored(0.7, 0.7);
      auto root = s.narrow(0, 0, dh).sqrt();
      // scores = x W_q^T W_k x^T with W_q^T = U sqrt(S), W_k = sqrt(S) V^T (top dh directions)
      wq.narrow(0, h * dh, dh).copy_((u.narrow(1, 0, dh) * root).t());
      wk.narrow(0, h * dh, dh).copy_(vh.narrow(0, 0, dh) * root.unsqueeze(1));
    }
    mimetic_cache_ = {wq, wk};
  } else {
    auto [u, s, vh] = factored(0.4, -0.4);
    auto root = s.sqrt();
    mimetic_cache_ = {u * root, vh * root.unsqueeze(1)};  // W_o W_v = U S V^T
  }
  mimetic_key_ = key;
  return mimetic_cache_;
}

void ViTForImageClassificationImpl::mimetic_init() {
  mimetic_ = true;
  reset_parameters([](const std::string& name) {
    std::string rest;
    return encoder_layer(name, &rest) >= 0 && ends_with(rest, "weight") && rest.rfind("attention.", 0) == 0;
  });
}

void ViTForImageClassificationImpl::sincos_position_init() {
  COLOSSAL_CHECK(config_.hidden_size % 4 == 0, "[vit] sine-cosine positions need hidden_size divisible by 4, got ",
                 config_.hidden_size);
  sincos_ = true;
  reset_parameters([](const std::string& name) { return name == "vit.embeddings.position_embeddings"; });
}

void ViTForImageClassificationImpl::set_patch_keep(double keep) {
  COLOSSAL_CHECK(keep > 0 && keep <= 1, "[vit] patch keep share must be in (0, 1], got ", keep);
  patch_keep_ = keep;
}

torch::Tensor ViTForImageClassificationImpl::forward(const torch::Tensor& pixels) {
  COLOSSAL_CHECK(!parallel_.pipeline.enabled(), "[vit] this model is one stage of a pipeline: run it through the "
                 "pipeline (forward_chunk), not as a whole model");
  return forward_chunk(0, pixels);
}

std::pair<bool, bool> ViTForImageClassificationImpl::chunk_ends(int chunk) const {
  const auto& pipe = parallel_.pipeline;
  if (!pipe.enabled()) return {true, true};
  return {chunk == pipe.chunk_of_first(), chunk == pipe.chunk_of_last()};
}

std::vector<torch::Tensor> ViTForImageClassificationImpl::chunk_parameters(int chunk) {
  const auto [first, last] = chunk_ends(chunk);
  const auto [begin, end] = chunk_layers_.at(chunk);
  std::vector<torch::Tensor> out;
  auto add = [&](const torch::nn::Module& m) {
    for (const auto& p : m.parameters())
      if (p.requires_grad()) out.push_back(p);
  };
  if (first) add(*vit->embeddings);
  for (size_t k = 0; k < vit->encoder->layers.size(); ++k)
    if (vit->encoder->layer_ids[k] >= begin && vit->encoder->layer_ids[k] < end) add(*vit->encoder->layers[k]);
  if (last) {
    add(*vit->layernorm);
    add(*classifier);
  }
  return out;
}

torch::Tensor ViTForImageClassificationImpl::forward_chunk(int chunk, const torch::Tensor& input) {
  COLOSSAL_CHECK(chunk >= 0 && chunk < static_cast<int>(chunk_layers_.size()), "[vit] model chunk ", chunk,
                 ": this rank holds ", chunk_layers_.size());
  const auto [first, last] = chunk_ends(chunk);
  torch::Tensor h;
  const int64_t images = input.size(0);  // a grid pads a batch that enters and leaves on this chunk
  if (first) {
    tools::MemoryTracer::Scope traced("embeddings");  // --memory_trace's modules (free when off)
    h = embed(input);
    // On a grid the replicated embeddings' output enters as this rank's block (grid_layers.h). A
    // batch the row blocks do not divide (an evaluation's last) is padded with copies of its first
    // image, dropped again before the classifier's output: they get no gradient. (Pipeline
    // stages pass blocks: there the microbatches must divide, enter_grid says so.)
    if (parallel_.grid_parallel()) {
      const int64_t rows = parallel_.grid.stream().row_parts();
      const int64_t pad = last ? (rows - images % rows) % rows : 0;
      if (pad > 0) h = torch::cat({h, h.narrow(0, 0, 1).expand({pad, h.size(1), h.size(2)})});
      h = parallel::enter_grid(h, parallel_.grid.stream());
    }
  } else {
    h = input;
  }
  const auto [begin, end] = chunk_layers_[chunk];
  for (size_t k = 0; k < vit->encoder->layers.size(); ++k) {
    if (vit->encoder->layer_ids[k] < begin || vit->encoder->layer_ids[k] >= end) continue;
    auto& layer = vit->encoder->layers[k];
    tools::MemoryTracer::Scope traced(tools::MemoryTracer::active() ? "layers." + std::to_string(vit->encoder->layer_ids[k]) : "");
    if (gradient_checkpointing_ && is_training()) {
      h = nn::checkpoint([l = layer.ptr()](const torch::Tensor& x) { return l->forward(x); }, h);
    } else {
      h = layer->forward(h);
    }
  }
  if (!last) return h;
  tools::MemoryTracer::Scope traced("head");
  h = call(vit->layernorm, h).select(1, 0);
  // The class tokens leave the grid whole: every rank runs the small classifier on them.
  if (parallel_.grid_parallel()) {
    h = parallel::leave_grid(h, parallel_.grid.stream());
    if (first) h = h.narrow(0, 0, images);  // the padding of a batch that entered on this chunk
  }
  return call(classifier, h);
}

torch::Tensor ViTForImageClassificationImpl::embed(const torch::Tensor& pixels) {
  auto h = vit->embeddings->forward(pixels);
  if (patch_keep_ < 1.0 && is_training()) {
    COLOSSAL_CHECK(!parallel_.grid_parallel(), "[vit] patch dropout on a tp_mode ",
                   dist::to_string(parallel_.grid.mode()), " grid is not built yet (every rank of the grid would draw its own patches); use --tp_mode 1d");
    const int64_t B = h.size(0), patches = h.size(1) - 1;
    const int64_t kept = std::max<int64_t>(1, std::llround(patches * patch_keep_));
    // A random subset per image: the first `kept` of a random permutation, after the class token.
    auto order = torch::rand({B, patches}).argsort(/*stable=*/false, /*dim=*/1).narrow(1, 0, kept) + 1;
    auto idx = torch::cat({torch::zeros({B, 1}, torch::kLong), order}, 1).to(h.device());
    h = h.gather(1, idx.unsqueeze(-1).expand({B, kept + 1, h.size(2)}));
  }
  return h;
}

torch::Tensor class_log_probs(ViTForImageClassification& model, const torch::Tensor& pixels, bool mirror) {
  auto log_probs = torch::log_softmax(model->forward(pixels).to(torch::kFloat), 1);
  if (!mirror) return log_probs;
  return mean_log_probs(log_probs, class_log_probs(model, pixels.flip({3}), false));
}

torch::Tensor mean_log_probs(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::logsumexp(torch::stack({a, b}), 0) - std::log(2.0);
}

parallel::ParallelPlan parallel_plan(const ViTConfig&) {
  using parallel::SplitStyle;
  parallel::ParallelPlan plan;
  plan.rules = {
      {"vit.embeddings", SplitStyle::kReplicate},
      {"vit.embeddings.patch_embeddings.projection", SplitStyle::kReplicate},
      {"vit.encoder.layer.*.layernorm_before", SplitStyle::kReplicate},
      {"vit.encoder.layer.*.attention.attention.query", SplitStyle::kColumn},
      {"vit.encoder.layer.*.attention.attention.key", SplitStyle::kColumn},
      {"vit.encoder.layer.*.attention.attention.value", SplitStyle::kColumn},
      {"vit.encoder.layer.*.attention.output.dense", SplitStyle::kRow},
      {"vit.encoder.layer.*.layernorm_after", SplitStyle::kReplicate},
      {"vit.encoder.layer.*.intermediate.dense", SplitStyle::kColumn},
      {"vit.encoder.layer.*.output.dense", SplitStyle::kRow},
      {"vit.layernorm", SplitStyle::kReplicate},
      {"classifier", SplitStyle::kReplicate},
  };
  return plan;
}

}  // namespace colossal::vit
