#pragma once
// What a transformer costs before it runs: parameters by module, FLOPs per token, model-state
// bytes per rank under each plugin and layout, activation bytes per layer with and without
// activation checkpointing. `colossal analyze` prints it; the layout selector ranks with it.
//
// The byte formulas follow this project's implementations (what each plugin keeps, what autograd
// saves in our layers), and tests/core/tools check them against the memory meter.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace colossal::tools {

/// The shape of a decoder (LLaMA, Mistral, Mixtral) or encoder (ViT) transformer.
struct ModelSpec {
  std::string family;  // "llama", "mixtral", "vit"
  int64_t vocab = 0;   // 0 for a ViT (it has patches and classes instead)
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_size = 0;          // 0: hidden / heads
  int64_t experts = 0;            // 0: a dense feed-forward
  int64_t experts_per_token = 0;  // top-k
  bool tied_embeddings = false;
  bool gated_mlp = true;  // SwiGLU (three matrices) or GELU (two, with biases)
  bool biases = false;    // linear layers with biases (ViT)
  bool qkv_biases = false;  // biases on the query, key and value projections only
  int64_t head_norms = 0;   // per-head norm vectors of head_size in each attention (q/k norms)
  int64_t layer_norms = 2;  // norms per layer (4: Gemma 2's around both halves' outputs too)
  bool layer_norm = false;        // LayerNorm (weight and bias) rather than RMSNorm (ViT: always)
  int64_t learned_positions = 0;  // rows of a learned position table (GPT-2), beside the embedding
  // ViT only.
  int64_t patch_dim = 0;  // channels x patch x patch
  int64_t patches = 0;    // tokens per image, the class token included
  int64_t classes = 0;

  int64_t head_dim() const { return head_size > 0 ? head_size : heads > 0 ? hidden / heads : 0; }
  int64_t q_dim() const { return heads * head_dim(); }
  int64_t kv_dim() const { return kv_heads * head_dim(); }
};

struct ModuleParameters {
  std::string name;       // "embed_tokens", "layers.N.self_attn", "layers.N.mlp", ...
  int64_t parameters = 0;
  int64_t active = 0;     // used per token (a MoE layer's routed experts only)
};

/// Every module once, in model order; layers are listed one by one.
std::vector<ModuleParameters> parameters_by_module(const ModelSpec& spec);
int64_t total_parameters(const ModelSpec& spec);

struct FlopsPerToken {
  double forward = 0;             // 2 x active matmul parameters + attention (causal square counted whole)
  double training = 0;            // 3 x forward
  double training_recompute = 0;  // 4 x forward: activation checkpointing runs the layers twice
  double decode = 0;              // one generated token with `sequence` tokens of context
};
FlopsPerToken flops_per_token(const ModelSpec& spec, int64_t sequence);

/// One way to run it: the parallel sizes, the plugin and its memory choices.
struct Layout {
  std::string plugin = "ddp";       // ddp | zero1 | zero2 | gemini | hybrid
  int dp = 1, tp = 1, pp = 1, sp = 1, ep = 1;
  int zero_stage = 0;               // hybrid only: 0, 1 or 2 over dp
  std::string precision = "fp32";   // fp32 | bf16 | fp16
  std::string offload = "none";     // gemini: none | cpu | nvme (where master weights and states live)
  std::string sp_mode = "none";     // with sp > 1: all_to_all or ring_attn
  bool activation_checkpointing = false;
  int64_t micro_batch = 1;          // samples per micro-batch (pp > 1: per pipeline microbatch)
  int64_t replica_batch = 0;        // samples per data-parallel replica per step (0: micro_batch)
  int64_t sequence = 0;
  std::string describe() const;
};

/// Bytes per rank by category ("parameters", "master weights", "gradients", "optimizer state"),
/// then by tier ("device", "host", "nvme"), for AdamW.
using Bytes = std::map<std::string, std::map<std::string, int64_t>>;
Bytes model_state_bytes(const ModelSpec& spec, const Layout& layout);
/// Parameters one rank holds before any ZeRO sharding: its pipeline stage's (the larger end
/// stage), its tensor-parallel slices, its ep share of the experts.
double parameters_per_rank(const ModelSpec& spec, const Layout& layout);
int64_t sum_tier(const Bytes& bytes, const std::string& tier);

struct ActivationBytes {
  int64_t per_layer = 0;       // what one layer keeps for backward over a micro-batch
  int64_t per_layer_checkpointed = 0;  // its input only
  int64_t head = 0;            // norm, logits and the loss's saved tensors (last stage)
  int64_t embedding = 0;
  int64_t total = 0;           // this rank's layers (its pipeline share) + head/embedding, with the layout's choice
};
ActivationBytes activation_bytes(const ModelSpec& spec, const Layout& layout);

/// The whole analysis as text (colossal analyze) and as JSON.
struct AnalysisOptions {
  int64_t sequence = 2048;
  int64_t micro_batch = 1;
  std::vector<int> world_sizes = {1, 2, 4, 8};
  std::string precision = "bf16";
};
std::string format_analysis(const ModelSpec& spec, const AnalysisOptions& options);
nlohmann::json analysis_json(const ModelSpec& spec, const AnalysisOptions& options);

}  // namespace colossal::tools
