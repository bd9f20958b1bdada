#include "bert/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <mutex>
#include <optional>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/nn/module_hooks.h"
#include "core/parallel/tensor/shard.h"
#include "core/tools/memory_tracer.h"

namespace colossal::bert {

using nn::call;

BertHead head_from_string(const std::string& name) {
  if (name == "mlm") return BertHead::kMaskedLM;
  if (name == "classify") return BertHead::kSequenceClassification;
  COLOSSAL_FAIL("[bert] task '", name, "': expected mlm or classify");
  return BertHead::kMaskedLM;
}

std::string architecture_of(BertHead head) {
  return head == BertHead::kMaskedLM ? "BertForMaskedLM" : "BertForSequenceClassification";
}

BertHead head_of_architectures(const std::vector<std::string>& architectures, BertHead fallback) {
  for (const auto& a : architectures) {
    if (a == "BertForMaskedLM" || a == "BertForPreTraining") return BertHead::kMaskedLM;
    if (a == "BertForSequenceClassification") return BertHead::kSequenceClassification;
  }
  return fallback;
}

namespace {

torch::nn::LayerNorm layer_norm(const BertConfig& c) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.hidden_size}).eps(c.layer_norm_eps));
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

EmbeddingsImpl::EmbeddingsImpl(const BertConfig& c) {
  word_embeddings = register_module("word_embeddings", torch::nn::Embedding(c.vocab_size, c.hidden_size));
  position_embeddings =
      register_module("position_embeddings", torch::nn::Embedding(c.max_position_embeddings, c.hidden_size));
  token_type_embeddings = register_module("token_type_embeddings", torch::nn::Embedding(c.type_vocab_size, c.hidden_size));
  LayerNorm = register_module("LayerNorm", layer_norm(c));
}

SelfAttentionImpl::SelfAttentionImpl(const BertConfig& c, const BuildContext& where) {
  query = register_module("query", where.at("query").linear(c.hidden_size, c.hidden_size, true));
  key = register_module("key", where.at("key").linear(c.hidden_size, c.hidden_size, true));
  value = register_module("value", where.at("value").linear(c.hidden_size, c.hidden_size, true));
}

DenseNormImpl::DenseNormImpl(int64_t in, int64_t out, bool norm, const BertConfig& c, const BuildContext& where) {
  dense = register_module("dense", where.at("dense").linear(in, out, true));
  if (norm) LayerNorm = register_module("LayerNorm", layer_norm(c));
}

AttentionImpl::AttentionImpl(const BertConfig& c, const BuildContext& where) {
  self = register_module("self", SelfAttention(c, where.at("self")));
  output = register_module("output", DenseNorm(c.hidden_size, c.hidden_size, true, c, where.at("output")));
}

LayerImpl::LayerImpl(const BertConfig& c, const BuildContext& where) {
  attention = register_module("attention", Attention(c, where.at("attention")));
  intermediate =
      register_module("intermediate", DenseNorm(c.hidden_size, c.intermediate_size, false, c, where.at("intermediate")));
  output = register_module("output", DenseNorm(c.intermediate_size, c.hidden_size, true, c, where.at("output")));
}

EncoderImpl::EncoderImpl(const BertConfig& c, const BuildContext& where) {
  auto stack = register_module("layer", std::make_shared<torch::nn::Module>("LayerStack"));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    layers.push_back(Layer(c, where.at("layer." + std::to_string(i))));
    stack->register_module(std::to_string(i), layers.back());
  }
}

BertModelImpl::BertModelImpl(const BertConfig& c, bool with_pooler, const BuildContext& where) {
  embeddings = register_module("embeddings", Embeddings(c));
  encoder = register_module("encoder", Encoder(c, where.at("encoder")));
  if (with_pooler) pooler = register_module("pooler", DenseNorm(c.hidden_size, c.hidden_size, false, c, where.at("pooler")));
}

MaskedLMTransformImpl::MaskedLMTransformImpl(const BertConfig& c, const BuildContext& where) {
  dense = register_module("dense", where.at("dense").linear(c.hidden_size, c.hidden_size, true));
  LayerNorm = register_module("LayerNorm", layer_norm(c));
}

MaskedLMPredictionsImpl::MaskedLMPredictionsImpl(const BertConfig& c, const BuildContext& where) {
  transform = register_module("transform", MaskedLMTransform(c, where.at("transform")));
  bias = register_parameter("bias", torch::zeros({c.vocab_size}));
}

MaskedLMHeadImpl::MaskedLMHeadImpl(const BertConfig& c, const BuildContext& where) {
  predictions = register_module("predictions", MaskedLMPredictions(c, where.at("predictions")));
}

BertForTaskImpl::BertForTaskImpl(const BertConfig& c, BertHead head, const parallel::ParallelContext& parallel)
    : config_(c), head_(head), parallel_(parallel) {
  COLOSSAL_CHECK(!parallel.grid_parallel(), "[bert] tp_mode ", dist::to_string(parallel.grid.mode()),
                 " is not built for BERT yet; use --tp_mode 1d");
  {  // first, before any layer draws: eager and deferred construction take the same seed
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    init_seed_ = at::check_generator<at::CPUGeneratorImpl>(gen)->random64();
  }
  config_.validate();
  check_parallel(config_, parallel_.tp_size(), parallel_.pipeline.enabled() ? 2 : 1, parallel_.sp_mode);
  const auto plan = parallel_plan(config_);
  const BuildContext root{plan, parallel_, ""};
  const bool classify = head == BertHead::kSequenceClassification;
  bert = register_module("bert", BertModel(config_, classify, root.at("bert")));
  if (classify) classifier = register_module("classifier", root.at("classifier").linear(c.hidden_size, c.num_labels, true));
  else cls = register_module("cls", MaskedLMHead(config_, root.at("cls")));
  // LibTorch's embeddings and norms make their weights at once: deferred again, so boost()
  // initialises every parameter the same way.
  if (nn::deferred_init_enabled()) nn::defer_parameters(*this);
  else reset_parameters();
}

void BertForTaskImpl::reset_parameters() {
  torch::NoGradGuard no_grad;
  const auto specs = parallel::collect_shard_specs(*this);
  for (auto& item : named_parameters()) {
    auto& p = item.value();
    if (nn::is_deferred(p)) continue;
    const auto* split = parallel::split_spec(specs, item.key());
    auto full = torch::empty(parallel::full_shape(p, split), torch::kFloat32);
    init_parameter(item.key(), full);
    p.copy_(parallel::local_part(full, split, p));
  }
}

void BertForTaskImpl::init_parameter(const std::string& name, torch::Tensor& full) const {
  torch::NoGradGuard no_grad;
  if (name.find("LayerNorm") != std::string::npos) {
    full.fill_(ends_with(name, "weight") ? 1.0 : 0.0);
    return;
  }
  if (ends_with(name, "bias")) {
    full.zero_();
    return;
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(nn::parameter_seed(init_seed_, name));
  full.normal_(0.0, config_.initializer_range, gen);
  if (name == "bert.embeddings.word_embeddings.weight" && config_.pad_token_id >= 0)
    full[config_.pad_token_id].zero_();  // the padding token's row, as nn.Embedding(padding_idx) starts
}

void BertForTaskImpl::set_dropout(double p) {
  COLOSSAL_CHECK(p >= 0 && p < 1, "[bert] dropout must be in [0, 1), got ", p);
  config_.hidden_dropout_prob = config_.attention_probs_dropout_prob = p;
  config_.classifier_dropout = -1;
}

torch::Tensor BertForTaskImpl::dropout(const torch::Tensor& x, double p) {
  if (!is_training() || p == 0) return x;
  auto keep = torch::empty_like(x).bernoulli_(1.0 - p, dropout_gen_);
  return x * keep / (1.0 - p);
}

torch::Tensor BertForTaskImpl::act(const torch::Tensor& x) const {
  if (config_.hidden_act == "relu") return torch::relu(x);
  return torch::gelu(x, config_.hidden_act == "gelu" ? "none" : "tanh");
}

torch::Tensor BertForTaskImpl::layer_forward(Layer& layer, const torch::Tensor& x, const torch::Tensor& mask) {
  auto& attn = layer->attention;
  // One gradient all-reduce for query, key and value (the column layers' shared input).
  auto entered = parallel::enter_tensor_parallel(x, parallel_);
  const int64_t B = x.size(0), N = x.size(1), local = attn->self->query->local_out_features();
  const int64_t d = config_.hidden_size / config_.num_attention_heads, heads = local / d;
  auto split = [&](const torch::Tensor& t) { return t.view({B, N, heads, d}).transpose(1, 2); };
  auto q = split(call(attn->self->query, entered)), k = split(call(attn->self->key, entered));
  auto v = split(call(attn->self->value, entered));
  const double attn_p = is_training() ? config_.attention_probs_dropout_prob : 0.0;
  const auto keys = mask.defined() ? std::optional<torch::Tensor>(mask) : std::nullopt;
  auto context = at::scaled_dot_product_attention(q, k, v, keys, attn_p).transpose(1, 2).reshape({B, N, local});
  auto attended = dropout(call(attn->output->dense, context), config_.hidden_dropout_prob);  // row-parallel: reduced
  auto h = call(attn->output->LayerNorm, attended + x);
  auto inner = act(call(layer->intermediate->dense, parallel::enter_tensor_parallel(h, parallel_)));
  auto out = dropout(call(layer->output->dense, inner), config_.hidden_dropout_prob);
  return call(layer->output->LayerNorm, out + h);
}

torch::Tensor BertForTaskImpl::encode(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                      const torch::Tensor& token_type_ids) {
  COLOSSAL_CHECK(input_ids.dim() == 2, "[bert] input_ids must be [batch, tokens], got ", input_ids.sizes());
  const int64_t B = input_ids.size(0), N = input_ids.size(1);
  COLOSSAL_CHECK(N <= config_.max_position_embeddings, "[bert] a sequence of ", N, " tokens is longer than "
                 "max_position_embeddings ", config_.max_position_embeddings);
  // This forward's dropout generator: one seed, the same on every rank of the tensor-parallel group.
  const bool drops = is_training() && (config_.hidden_dropout_prob > 0 || config_.resolved_classifier_dropout() > 0);
  if (drops) {
    auto seed = torch::randint(std::numeric_limits<int64_t>::max(), {1}, torch::kLong);
    if (parallel_.tensor_parallel()) dist::broadcast(seed, 0, parallel_.tp);
    dropout_gen_ = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed.item<int64_t>()));
  }
  auto& e = bert->embeddings;
  auto types = token_type_ids.defined() ? token_type_ids : torch::zeros_like(input_ids);
  auto positions = torch::arange(N, input_ids.options().dtype(torch::kLong)).unsqueeze(0);
  auto h = call(e->word_embeddings, input_ids) + call(e->token_type_embeddings, types) +
           call(e->position_embeddings, positions);
  h = dropout(call(e->LayerNorm, h), config_.hidden_dropout_prob);
  torch::Tensor mask;  // [B, 1, 1, N]: true where a key may be attended
  if (attention_mask.defined()) {
    COLOSSAL_CHECK(attention_mask.sizes() == input_ids.sizes(), "[bert] attention_mask ", attention_mask.sizes(),
                   " does not match input_ids ", input_ids.sizes());
    mask = attention_mask.to(torch::kBool).view({B, 1, 1, N});
  }
  for (size_t i = 0; i < bert->encoder->layers.size(); ++i) {
    tools::MemoryTracer::Scope traced(tools::MemoryTracer::active() ? "layers." + std::to_string(i) : "");
    h = layer_forward(bert->encoder->layers[i], h, mask);
  }
  return h;
}

torch::Tensor BertForTaskImpl::masked_lm_logits(const torch::Tensor& hidden_rows) {
  COLOSSAL_CHECK(head_ == BertHead::kMaskedLM, "[bert] this model has a classification head, not a masked-LM one");
  auto& t = cls->predictions->transform;
  auto x = call(t->LayerNorm, act(call(t->dense, hidden_rows)));
  auto& words = *bert->embeddings->word_embeddings;
  return nn::run_hooked(words, [&] { return torch::nn::functional::linear(x, words.weight); }) +
         nn::run_hooked(*cls->predictions, [&] { return cls->predictions->bias * 1.0; });
}

torch::Tensor BertForTaskImpl::forward(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                       const torch::Tensor& token_type_ids) {
  auto h = encode(input_ids, attention_mask, token_type_ids);
  tools::MemoryTracer::Scope traced("head");
  if (head_ == BertHead::kMaskedLM) return masked_lm_logits(h);
  auto pooled = torch::tanh(call(bert->pooler->dense, h.select(1, 0)));
  return call(classifier, dropout(pooled, config_.resolved_classifier_dropout()));
}

torch::Tensor BertForTaskImpl::loss(const torch::Tensor& input_ids, const torch::Tensor& attention_mask,
                                    const torch::Tensor& token_type_ids, const torch::Tensor& labels,
                                    torch::Tensor* logits) {
  if (head_ == BertHead::kSequenceClassification) {
    auto out = forward(input_ids, attention_mask, token_type_ids).to(torch::kFloat);
    if (logits) *logits = out;
    return torch::nn::functional::cross_entropy(out, labels.to(out.device()));
  }
  auto h = encode(input_ids, attention_mask, token_type_ids);
  auto flat_labels = labels.reshape({-1}).to(h.device());
  auto rows = flat_labels.ne(-100).nonzero().squeeze(1);
  // Only the predicted positions go through the head (the rest would be thrown away by the loss).
  auto out = masked_lm_logits(h.reshape({-1, h.size(2)}).index_select(0, rows)).to(torch::kFloat);
  if (logits) *logits = out;
  if (rows.numel() == 0) return out.sum() * 0.0;  // nothing masked: a step with no gradient, on every rank alike
  return torch::nn::functional::cross_entropy(out, flat_labels.index_select(0, rows));
}

void check_parallel(const BertConfig& c, int tp, int pp, parallel::SequenceParallelMode sp_mode) {
  COLOSSAL_CHECK(sp_mode == parallel::SequenceParallelMode::kNone, "[bert] sp_mode ", parallel::to_string(sp_mode),
                 ": BERT has no sequence parallelism (sequences of at most ", c.max_position_embeddings,
                 " tokens fit on every rank); use tp or dp");
  COLOSSAL_CHECK(pp == 1, "[bert] pp ", pp, ": BERT is not split into pipeline stages in this version; use tp or dp");
  COLOSSAL_CHECK(c.num_attention_heads % tp == 0, "[bert] num_attention_heads ", c.num_attention_heads,
                 " does not divide by tp ", tp);
  COLOSSAL_CHECK(c.intermediate_size % tp == 0, "[bert] intermediate_size ", c.intermediate_size,
                 " does not divide by tp ", tp);
}

parallel::ParallelPlan parallel_plan(const BertConfig&) {
  using parallel::SplitStyle;
  parallel::ParallelPlan plan;
  plan.rules = {
      {"bert.encoder.layer.*.attention.self.query", SplitStyle::kColumn},
      {"bert.encoder.layer.*.attention.self.key", SplitStyle::kColumn},
      {"bert.encoder.layer.*.attention.self.value", SplitStyle::kColumn},
      {"bert.encoder.layer.*.attention.output.dense", SplitStyle::kRow},
      {"bert.encoder.layer.*.intermediate.dense", SplitStyle::kColumn},
      {"bert.encoder.layer.*.output.dense", SplitStyle::kRow},
      {"bert.pooler.dense", SplitStyle::kReplicate},
      {"classifier", SplitStyle::kReplicate},
      {"cls.predictions.transform.dense", SplitStyle::kReplicate},
  };
  return plan;
}

}  // namespace colossal::bert
