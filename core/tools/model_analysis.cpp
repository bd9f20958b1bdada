#include "core/tools/model_analysis.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>

#include "core/common/check.h"

namespace colossal::tools {
namespace {

int64_t linear(int64_t in, int64_t out, bool bias) { return in * out + (bias ? out : 0); }

int64_t attention_parameters(const ModelSpec& s) {
  const bool qkv = s.biases || s.qkv_biases;
  return linear(s.hidden, s.q_dim(), qkv) + 2 * linear(s.hidden, s.kv_dim(), qkv) +
         linear(s.q_dim(), s.hidden, s.biases) + s.head_norms * s.head_size;
}

int64_t expert_parameters(const ModelSpec& s) {
  return s.gated_mlp ? 3 * s.hidden * s.intermediate
                     : linear(s.hidden, s.intermediate, s.biases) + linear(s.intermediate, s.hidden, s.biases);
}

// LayerNorm (ViT's, GPT-2's) has a bias.
int64_t norm_parameters(const ModelSpec& s) { return s.layer_norm || s.family == "vit" ? 2 * s.hidden : s.hidden; }

// Elements per token that one decoder layer keeps for backward in this project's implementation,
// measured with the memory tracer (tests/llama/analysis_test.cpp fits and checks them): 6 per
// hidden unit, 2 per key/value unit, 4 per feed-forward unit and a few per token (the norms'
// reciprocal RMS, attention's log-sum-exp), with no sequence-squared term (SDPA does not keep the
// score matrix). Of the six hidden-wide tensors, three are the full-width layer input and norm
// outputs; three (q after rotary, the attention output, the o-projection's input) are split by tp.
constexpr double kLayerFullWidth = 3;
constexpr double kLayerSplitWidth = 3;
constexpr double kLayerKv = 2;
constexpr double kLayerFfn = 4;
constexpr double kLayerPerToken = 8;

int64_t bytes_of(const std::string& precision) { return precision == "fp32" ? 4 : 2; }

// A rank's share of the model: its pipeline stage's layers (the largest stage: the first holds the
// embedding, the last the head), tensor-parallel shards of every matrix, its ep share of experts.
struct Share {
  double dense = 0;    // replicated over ep
  double experts = 0;  // sharded over ep
};

Share rank_share(const ModelSpec& s, const Layout& l) {
  const int64_t layers_per_stage = (s.layers + l.pp - 1) / l.pp;
  const double tp = l.tp;
  double layer_dense = attention_parameters(s) / tp + static_cast<double>(s.layer_norms * norm_parameters(s));
  double layer_experts = 0;
  if (s.experts > 0) {
    layer_dense += static_cast<double>(s.hidden) * s.experts;  // the router (replicated)
    layer_experts = static_cast<double>(s.experts) * expert_parameters(s) / tp / l.ep;
  } else {
    layer_dense += expert_parameters(s) / tp;
  }
  double embed = 0, head = 0;
  if (s.family == "vit") {
    embed = (linear(s.patch_dim, s.hidden, true) + (s.patches + 1) * s.hidden) / tp;
    head = norm_parameters(s) + linear(s.hidden, s.classes, true) / tp;
  } else {
    embed = static_cast<double>(s.vocab) * s.hidden / tp;
    head = norm_parameters(s) + (s.tied_embeddings ? 0.0 : static_cast<double>(s.vocab) * s.hidden / tp);
  }
  // A tied head on a different stage from the embedding keeps its own copy of the matrix.
  if (s.tied_embeddings && l.pp > 1) head += static_cast<double>(s.vocab) * s.hidden / tp;
  Share out;
  out.dense = layers_per_stage * layer_dense + (l.pp == 1 ? embed + head : std::max(embed, head));
  out.experts = layers_per_stage * layer_experts;
  return out;
}

void add(Bytes& b, const std::string& category, const std::string& tier, double bytes) {
  if (bytes > 0) b[category][tier] += static_cast<int64_t>(bytes + 0.5);
}

}  // namespace

double parameters_per_rank(const ModelSpec& spec, const Layout& layout) {
  const Share share = rank_share(spec, layout);
  return share.dense + share.experts;
}

std::vector<ModuleParameters> parameters_by_module(const ModelSpec& s) {
  std::vector<ModuleParameters> out;
  auto push = [&](std::string name, int64_t n, int64_t active) { out.push_back({std::move(name), n, active}); };
  if (s.family == "vit") {
    const int64_t embed = linear(s.patch_dim, s.hidden, true) + (s.patches + 1) * s.hidden;
    push("embeddings", embed, embed);
  } else {
    push("embed_tokens", s.vocab * s.hidden, s.vocab * s.hidden);
    if (s.learned_positions > 0)
      push("embed_positions", s.learned_positions * s.hidden, s.learned_positions * s.hidden);
  }
  for (int64_t i = 0; i < s.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    push(p + "self_attn", attention_parameters(s), attention_parameters(s));
    if (s.experts > 0) {
      push(p + "router", s.hidden * s.experts, s.hidden * s.experts);
      push(p + "experts", s.experts * expert_parameters(s), s.experts_per_token * expert_parameters(s));
    } else {
      push(p + "mlp", expert_parameters(s), expert_parameters(s));
    }
    push(p + "norms", s.layer_norms * norm_parameters(s), s.layer_norms * norm_parameters(s));
  }
  push("norm", norm_parameters(s), norm_parameters(s));
  if (s.family == "vit") {
    push("classifier", linear(s.hidden, s.classes, true), linear(s.hidden, s.classes, true));
  } else if (!s.tied_embeddings) {
    push("lm_head", s.vocab * s.hidden, s.vocab * s.hidden);
  }
  return out;
}

int64_t total_parameters(const ModelSpec& spec) {
  int64_t n = 0;
  for (const auto& m : parameters_by_module(spec)) n += m.parameters;
  return n;
}

FlopsPerToken flops_per_token(const ModelSpec& s, int64_t sequence) {
  // Matmul parameters active per token: every projection and the head (tied or not); not the
  // embedding lookup, norms or biases' adds.
  double matmul = 0;
  for (const auto& m : parameters_by_module(s)) {
    if (m.name == "embed_tokens" || m.name == "norm" || m.name.find(".norms") != std::string::npos) continue;
    matmul += static_cast<double>(m.active);
  }
  if (s.family != "vit" && s.tied_embeddings) matmul += static_cast<double>(s.vocab) * s.hidden;
  FlopsPerToken f;
  const double attention = 4.0 * s.layers * s.hidden * sequence;  // scores and weighted values
  f.forward = 2 * matmul + attention;
  f.training = 3 * f.forward;
  f.training_recompute = 4 * f.forward;
  f.decode = f.forward;  // one new token against `sequence` cached ones: the same count
  return f;
}

std::string Layout::describe() const {
  std::string out = plugin;
  if (plugin == "hybrid") out += " zero" + std::to_string(zero_stage);
  out += " dp" + std::to_string(dp);
  if (sp > 1) out += c10::str(" sp", sp, "(", sp_mode, ")");
  for (auto [axis, n] : {std::pair{"tp", tp}, {"pp", pp}, {"ep", ep}})
    if (n > 1) out += c10::str(" ", axis, n);
  out += " " + precision;
  if (offload != "none") out += " offload " + offload;
  if (activation_checkpointing) out += " ckpt";
  if (pp > 1 && replica_batch > 0) out += c10::str(" mb", micro_batch, "x", replica_batch / std::max<int64_t>(micro_batch, 1));
  return out;
}

// What each plugin keeps per parameter (AdamW: two fp32 moments), N = dp (dp x sp for ZeRO under
// the hybrid plugin: sequence ranks hold the same parameters):
//   ddp:          params c, grads c (+ masters 4 in low precision), moments 8
//   zero1:        params c, full gradient buckets c, masters 4/N (low precision; fp32 updates the
//                 working parameter in place) with their gradients 4/N, moments 8/N
//   zero2:        as zero1 but gradients only as owned shards (4/N in fp32 for the master's use)
//   gemini:       params c/N in chunks, grads c/N, masters 4/N, moments 8/N; offload moves the
//                 masters, their gradients and the moments to the host (cpu) or to files (nvme)
Bytes model_state_bytes(const ModelSpec& spec, const Layout& l) {
  const Share share = rank_share(spec, l);
  const double P = share.dense + share.experts;
  const double c = static_cast<double>(bytes_of(l.precision));
  const bool low = l.precision != "fp32";
  std::string plugin = l.plugin;
  if (plugin == "hybrid") plugin = l.zero_stage == 0 ? "ddp" : "zero" + std::to_string(l.zero_stage);
  const double N = plugin == "gemini" ? l.dp : static_cast<double>(l.dp) * l.sp;
  // Expert parameters are reduced over the expert data-parallel group (dp x sp / ep ranks... here
  // folded into the dense share's N: an approximation of a few percent for MoE layouts).
  Bytes b;
  if (plugin == "ddp") {
    add(b, "parameters", "device", c * P);
    add(b, "gradients", "device", c * P);
    if (low) add(b, "master weights", "device", 4 * P);  // (their fp32 gradients live only during the step)
    add(b, "optimizer state", "device", 8 * P);
  } else if (plugin == "zero1" || plugin == "zero2") {
    add(b, "parameters", "device", c * P);
    add(b, "gradients", "device", plugin == "zero1" ? c * P : 4 * P / N);
    if (low) {
      add(b, "master weights", "device", 4 * P / N);
      if (plugin == "zero1") add(b, "gradients", "device", 4 * P / N);
    }
    add(b, "optimizer state", "device", 8 * P / N);
  } else if (plugin == "gemini") {
    const std::string tier = l.offload == "none" ? "device" : l.offload == "cpu" ? "host" : "nvme";
    add(b, "parameters", "device", c * P / N);
    add(b, "gradients", l.offload == "none" ? "device" : "host", c * P / N);
    if (low || l.offload != "none") add(b, "master weights", tier, 4 * P / N);
    add(b, "optimizer state", tier, 8 * P / N);
  } else {
    COLOSSAL_FAIL("[analyze] unknown plugin '", l.plugin, "' (known: ddp, zero1, zero2, gemini, hybrid)");
  }
  return b;
}

int64_t sum_tier(const Bytes& bytes, const std::string& tier) {
  int64_t n = 0;
  for (const auto& [category, tiers] : bytes) {
    auto it = tiers.find(tier);
    if (it != tiers.end()) n += it->second;
  }
  return n;
}

// Activations: the per-token element counts above, times tokens per micro-batch on this rank.
ActivationBytes activation_bytes(const ModelSpec& s, const Layout& l) {
  const double c = static_cast<double>(bytes_of(l.precision));
  const double tokens = static_cast<double>(l.micro_batch) * (s.family == "vit" ? s.patches : l.sequence) / l.sp;
  const double h = static_cast<double>(s.q_dim()) / l.tp, kv = static_cast<double>(s.kv_dim()) / l.tp;
  const double i = static_cast<double>(s.intermediate) / l.tp;
  const double hf = s.hidden;  // the layer input and norms are not split by tp
  double per_token = kLayerFullWidth * hf + kLayerSplitWidth * h + kLayerKv * kv + kLayerPerToken;
  if (s.experts > 0) {
    // Each routed copy of a token runs one expert's feed-forward; the router keeps its logits.
    per_token += s.experts_per_token * (kLayerFfn * i + hf) + 2.0 * s.experts;
  } else {
    per_token += (s.gated_mlp ? kLayerFfn : 2.0) * i;
  }
  ActivationBytes a;
  a.per_layer = static_cast<int64_t>(tokens * per_token * c);
  a.per_layer_checkpointed = static_cast<int64_t>(tokens * hf * c);
  const double vocab = s.family == "vit" ? s.classes : static_cast<double>(s.vocab) / l.tp;
  // The final norm's output and the logits (the fused loss keeps only a log-sum-exp per token).
  a.head = static_cast<int64_t>(tokens * (hf + vocab) * c);
  a.embedding = static_cast<int64_t>(tokens * hf * c);
  const int64_t layers_per_stage = (s.layers + l.pp - 1) / l.pp;
  // 1F1B keeps up to pp micro-batches in flight on the first stage.
  const int64_t microbatches = l.replica_batch > 0 ? std::max<int64_t>(1, l.replica_batch / std::max<int64_t>(l.micro_batch, 1)) : l.pp;
  const int64_t in_flight = l.pp > 1 ? std::min<int64_t>(l.pp, microbatches) : 1;
  a.total = in_flight * (layers_per_stage * (l.activation_checkpointing ? a.per_layer_checkpointed : a.per_layer) +
                         (l.pp == 1 ? a.embedding : 0)) + a.head;
  return a;
}

namespace {

std::string human(double v, const char* unit) {
  const char* scale[] = {"", "K", "M", "G", "T", "P"};
  int k = 0;
  while (v >= 1000 && k < 5) {
    v /= 1000;
    ++k;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s%s", v, scale[k], unit);
  return buf;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", static_cast<double>(bytes) / (1LL << 30));
  return buf;
}

// The layouts the table lists for a world size: each plugin on pure data parallelism, then tensor
// and pipeline splits where they divide the model.
Layout base_layout(const AnalysisOptions& o) {
  Layout l;
  l.precision = o.precision;
  l.sequence = o.sequence;
  l.micro_batch = o.micro_batch;
  return l;
}

std::vector<Layout> layouts_for(const ModelSpec& s, const AnalysisOptions& o, int world) {
  std::vector<Layout> out;
  auto base = [&] { return base_layout(o); };
  for (const char* plugin : {"ddp", "zero1", "zero2", "gemini"}) {
    Layout l = base();
    l.plugin = plugin;
    l.dp = world;
    out.push_back(l);
  }
  for (const char* offload : {"cpu", "nvme"}) {
    Layout l = base();
    l.plugin = "gemini";
    l.dp = world;
    l.offload = offload;
    out.push_back(l);
  }
  for (int tp = 2; tp <= world; tp *= 2) {
    if (s.heads % tp != 0 || s.kv_heads % tp != 0) break;
    Layout l = base();
    l.plugin = "hybrid";
    l.tp = tp;
    l.dp = world / tp;
    l.zero_stage = l.dp > 1 ? 1 : 0;
    out.push_back(l);
  }
  for (int pp = 2; pp <= world && pp <= s.layers; pp *= 2) {
    Layout l = base();
    l.plugin = "hybrid";
    l.pp = pp;
    l.dp = world / pp;
    l.zero_stage = l.dp > 1 ? 1 : 0;
    out.push_back(l);
  }
  return out;
}

// One row of the layout table: model state by category and tier, activations with and without
// checkpointing.
struct LayoutRow {
  int world = 1;
  Layout layout;
  Bytes bytes;
  int64_t activations = 0, activations_checkpointed = 0;
};

std::vector<LayoutRow> layout_rows(const ModelSpec& s, const AnalysisOptions& o) {
  std::vector<LayoutRow> rows;
  for (int world : o.world_sizes) {
    for (const auto& l : layouts_for(s, o, world)) {
      Layout ckpt = l;
      ckpt.activation_checkpointing = true;
      rows.push_back({world, l, model_state_bytes(s, l), activation_bytes(s, l).total, activation_bytes(s, ckpt).total});
    }
  }
  return rows;
}

}  // namespace

nlohmann::json analysis_json(const ModelSpec& s, const AnalysisOptions& o) {
  nlohmann::json modules = nlohmann::json::array();
  for (const auto& m : parameters_by_module(s))
    modules.push_back({{"module", m.name}, {"parameters", m.parameters}, {"active", m.active}});
  const auto f = flops_per_token(s, o.sequence);
  nlohmann::json layouts = nlohmann::json::array();
  for (const auto& row : layout_rows(s, o)) {
    nlohmann::json cats = nlohmann::json::object();
    for (const auto& [category, tiers] : row.bytes)
      for (const auto& [tier, n] : tiers) cats[category][tier] = n;
    layouts.push_back({{"world", row.world}, {"layout", row.layout.describe()}, {"model_state_bytes", cats},
                       {"device_bytes", sum_tier(row.bytes, "device")}, {"host_bytes", sum_tier(row.bytes, "host")},
                       {"nvme_bytes", sum_tier(row.bytes, "nvme")}, {"activation_bytes", row.activations},
                       {"activation_bytes_checkpointed", row.activations_checkpointed}});
  }
  const auto a = activation_bytes(s, base_layout(o));
  return {{"family", s.family},
          {"parameters", total_parameters(s)},
          {"modules", modules},
          {"sequence", o.sequence},
          {"micro_batch", o.micro_batch},
          {"precision", o.precision},
          {"flops_per_token", {{"forward", f.forward}, {"training", f.training},
                               {"training_with_recompute", f.training_recompute}, {"decode", f.decode}}},
          {"activation_bytes_per_layer", a.per_layer},
          {"activation_bytes_per_layer_checkpointed", a.per_layer_checkpointed},
          {"activation_bytes_head", a.head},
          {"layouts", layouts}};
}

std::string format_analysis(const ModelSpec& s, const AnalysisOptions& o) {
  std::string out;
  char line[256];
  const int64_t total = total_parameters(s);
  out += c10::str(s.family, ": ", human(static_cast<double>(total), ""), " parameters (", total, ")\n\n");
  // Modules: the first layer stands for all (they are identical); the others as they are.
  out += "parameters by module (every layer is like layers.0):\n";
  for (const auto& m : parameters_by_module(s)) {
    if (m.name.rfind("layers.", 0) == 0 && m.name.rfind("layers.0.", 0) != 0) continue;
    std::snprintf(line, sizeof line, "  %-22s %14lld  %6.2f%%%s\n", m.name.c_str(), static_cast<long long>(m.parameters),
                  100.0 * m.parameters / total,
                  m.active != m.parameters ? c10::str("  (", m.active, " active per token)").c_str() : "");
    out += line;
  }
  const auto f = flops_per_token(s, o.sequence);
  out += c10::str("\nFLOPs per token at sequence ", o.sequence, ": forward ", human(f.forward, "FLOP"), ", training ",
                  human(f.training, "FLOP"), " (", human(f.training_recompute, "FLOP"),
                  " with activation checkpointing), decode ", human(f.decode, "FLOP"), "\n");
  const auto a = activation_bytes(s, base_layout(o));
  out += c10::str("activations per layer (micro-batch ", o.micro_batch, ", ", o.precision, "): ", gib(a.per_layer),
                  " GiB, checkpointed ", gib(a.per_layer_checkpointed), " GiB; head and loss ", gib(a.head), " GiB\n\n");
  out += c10::str("model state per rank (GiB, AdamW, ", o.precision, "), and activations per rank:\n");
  std::snprintf(line, sizeof line, "  %5s  %-34s %9s %9s %9s %11s %11s\n", "world", "layout", "device", "host", "nvme",
                "activations", "ckpt acts");
  out += line;
  for (const auto& row : layout_rows(s, o)) {
    std::snprintf(line, sizeof line, "  %5d  %-34s %9s %9s %9s %11s %11s\n", row.world, row.layout.describe().c_str(),
                  gib(sum_tier(row.bytes, "device")).c_str(), gib(sum_tier(row.bytes, "host")).c_str(),
                  gib(sum_tier(row.bytes, "nvme")).c_str(), gib(row.activations).c_str(),
                  gib(row.activations_checkpointed).c_str());
    out += line;
  }
  return out;
}

}  // namespace colossal::tools
