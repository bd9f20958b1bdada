#pragma once
// LLaMA for the generation engine (core/inference): no autograd, the q/k/v projections fused into
// one matrix and gate/up into another at load time (one product each instead of three and two),
// every matrix packed for generation (core/inference/packed_linear: fp32, bf16, int8 or int4 with
// per-block scales; decode tokens through the bandwidth-bound matvec kernels, prompts through one
// GEMM). The residual stream, norms, rotary embeddings and logits stay in fp32; the elementwise
// work is plain loops over rows into buffers the model keeps (no allocation per token once they
// have grown). A fresh prompt attends through ATen's fused causal SDPA; decode tokens and
// continued prefill chunks through the paged KV cache. Mixtral's experts each run once per step
// over the tokens routed to them.
//
// Tensor parallelism (a model loaded with a ParallelContext): each rank keeps its slices, i.e.
// its query heads and their key/value heads (one whole kv head when there are fewer than tp),
// its share of the MLP and of the vocabulary. Attention and MLP outputs and the embedding
// lookup are all-reduced, the logits all-gathered, so every rank returns the same logits and
// the engines on all ranks step in lockstep; the KV cache holds only the rank's kv heads.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/checkpoint/gguf.h"
#include "core/inference/lora_adapters.h"
#include "core/inference/model.h"
#include "core/inference/packed_linear.h"
#include "llama/config.h"
#include "llama/model.h"
#include "llama/tokenizer.h"

namespace colossal::llama {

class LlamaInference : public inference::CausalLM {
 public:
  struct Options {
    at::ScalarType dtype = at::kFloat;  // the KV cache (fp32 or bf16), and the weights unless `weights` is set
    std::optional<inference::WeightFormat> weights;  // fp32, bf16, fp16, int8, int4 (K-quants from GGUF)
    /// The KV cache's dtype when not the one `dtype` gives it: float32, bfloat16 or int8 (q8_0).
    std::optional<at::ScalarType> kv_cache;
    /// int8/int4 from load(): keep the packed matrices in `dir`/packed-<format>.safetensors and
    /// read them from there while the checkpoint's files are unchanged (quantized once, then mapped).
    bool reuse_packed = true;
    /// infer_llama's --dtype: "fp32" (fp32 weights and cache), "bf16", "fp16", "int8", "int4" (bf16 cache).
    static Options named(const std::string& name);
    inference::WeightFormat weight_format() const;
  };
  /// Named packed matrices ("layers.3.qkv", "layers.3.experts.1.down", "embed", "lm_head").
  using PackedMatrices = std::map<std::string, inference::PackedLinear>;
  /// Takes (fused, converted) copies of a trained model's weights; matrices found in `packed`
  /// (same format and shape) are taken from there instead of packed again.
  LlamaInference(LlamaForCausalLM& model, Options options, const PackedMatrices* packed = nullptr);
  /// A Hugging Face directory (config.json + safetensors); under tensor parallelism each rank
  /// reads only its slices.
  static std::shared_ptr<LlamaInference> load(const std::string& dir, Options options,
                                              const parallel::ParallelContext& parallel = {});
  /// A LLaMA-architecture GGUF file (llama/gguf.h) on one process; without options.weights the
  /// matrices stay in the file's format (q8_0 -> int8, q4_0 -> int4, f16, bf16, f32, K-quants), with
  /// Options::named's KV cache for it.
  static std::shared_ptr<LlamaInference> load_gguf(const std::string& path, Options options);

  inference::CacheShape cache_shape() const override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  int64_t sliding_window() const override { return config_.shared_window(); }
  /// Not re-entrant: the model keeps its activation buffers between calls.
  at::Tensor forward(const inference::ModelInput& input, inference::PagedKVCache& cache) override;
  const LlamaConfig& config() const { return config_; }
  const Options& options() const { return options_; }
  /// Next-token logits [ids, vocab] (fp32) at every position of one fresh sequence, through a
  /// scratch KV cache of its own: for scoring text (perplexity) and tests. `chunk` > 0 feeds the
  /// tokens that many at a time through the cache (1: exactly the decode path), 0 all at once.
  at::Tensor logits(const std::vector<int64_t>& ids, int64_t chunk = 0);
  /// Every packed matrix by name (for saving them).
  PackedMatrices packed_matrices() const;
  /// Writes packed_matrices() to `file` (safetensors, atomically) with `signature` in its metadata.
  void save_packed(const std::string& file, const std::string& signature) const;
  /// The matrices of a file save_packed wrote, if it exists, holds `format` and `signature`
  /// (otherwise empty: the caller packs again).
  static PackedMatrices load_packed(const std::string& file, inference::WeightFormat format,
                                    const std::string& signature);
  /// Multi-LoRA serving: keeps the LoRA adapters attached to `adapted` (a model of this one's
  /// config and tensor-parallel layout with adapters on its linear layers, e.g. built lazily and
  /// given peft::load_adapter) beside the packed base, unmerged; returns the adapter's id (1, 2,
  /// ...) that requests name (GenerationRequest::adapter). Adapters on experts are refused.
  int64_t add_adapter(LlamaForCausalLM& adapted);
  int64_t num_adapters() const override { return adapters_; }
  /// Bytes of the matrices one decode token reads (every layer's, the head's): the bandwidth bound.
  int64_t weight_bytes_per_token() const;

 private:
  struct Layer {
    // fp32; Gemma's (1 + w) norms folded into their weights. post_norm: the MLP's input norm, or
    // (Gemma 2) the attention output's, with pre_ff_norm / post_ff_norm around the MLP.
    at::Tensor input_norm, post_norm, pre_ff_norm, post_ff_norm, qkv_bias, o_bias;
    at::Tensor input_norm_bias, post_norm_bias, up_bias, down_bias;  // GPT-2: LayerNorm, the MLP's biases
    at::Tensor q_norm, k_norm;                           // Qwen3: [head_dim] fp32
    inference::PackedLinear qkv, o, gate_up, down;
    inference::MatrixAdapters qkv_lora, o_lora, gate_up_lora, down_lora;  // multi-LoRA serving
    at::Tensor router;                                              // Mixtral: [experts, hidden] fp32
    std::vector<inference::PackedLinear> expert_gate_up, expert_down;  // per expert, w1 and w3 fused
  };
  // Activations of the last forward, grown to the largest token count seen.
  struct Buffers {
    int64_t capacity = 0;
    at::Tensor h, normed, qkv, attn, out, gate_up, act;
  };
  // The weights are filled in by the caller (load_gguf); the tables are made here.
  LlamaInference(const LlamaConfig& config, Options options);
  void make_tables();
  /// GPT-2's tensors from a GGUF file (llama/gguf.cpp), matrices in `format`.
  // keep_native: q8_0, q4_0 and K-quant matrices stay in their own blocks whatever `format` says.
  void load_gguf_gpt2(const checkpoint::GgufFile& file, inference::WeightFormat format, bool keep_native);
  at::Tensor all_reduced(at::Tensor x) const;
  at::Tensor mixture_of_experts(const at::Tensor& x, const Layer& layer, int64_t ffn) const;
  void attention(const inference::ModelInput& in, inference::PagedKVCache& cache, int64_t layer, int64_t n);
  /// RMSNorm, or LayerNorm when `bias` is defined, of `rows` rows of x into out (in place allowed).
  void norm_rows(const float* x, const at::Tensor& weight, const at::Tensor& bias, float* out, int64_t rows) const;
  Buffers& buffers(int64_t n);

  LlamaConfig config_;
  Options options_;
  parallel::ParallelContext parallel_;
  int64_t heads_ = 0, kv_heads_ = 0, vocab_start_ = 0;  // this rank's
  // Fewer kv heads than tp: the rank's layers hold them whole, and it reads rows kv_select_ * d on.
  bool kv_whole_ = false;
  int64_t kv_select_ = 0;
  int64_t adapters_ = 0;
  std::vector<Layer> layers_;
  parallel::expert::RouterOptions router_;  // Mixtral
  at::Tensor norm_, norm_bias_, cos_, sin_;
  at::Tensor positions_;  // GPT-2: the learned position embeddings [positions, hidden] fp32
  inference::PackedLinear embed_, lm_head_;
  Buffers buffers_;
};

/// The tokenizer as the engine's detokenizer. Ids past the tokenizer's vocabulary (a model whose
/// vocabulary is padded, e.g. to a multiple of 64 for tensor parallelism) have no text.
class TokenizerDetokenizer : public inference::Detokenizer {
 public:
  explicit TokenizerDetokenizer(std::shared_ptr<const text::Tokenizer> tok) : tok_(std::move(tok)) {}
  std::string decode(const std::vector<int64_t>& ids) const override {
    std::vector<int64_t> known;
    known.reserve(ids.size());
    for (auto id : ids)
      if (id >= 0 && id < tok_->vocab_size()) known.push_back(id);
    return tok_->decode(known);
  }

 private:
  std::shared_ptr<const text::Tokenizer> tok_;
};

}  // namespace colossal::llama
