#pragma once
// LLaMA for the generation engine on a CUDA GPU. The engine (scheduler, block tables, sampling)
// stays on the host; each step's token ids and attention metadata go to the device, the logits
// come back. On the device: fused q/k/v and gate/up matrices in the model's dtype (fp32, bf16 or
// fp16) multiplied by cuBLAS, RMSNorm, rotary and SwiGLU from kernels/cuda, the KV cache in the
// same dtype written with one index_copy per layer, a fresh prompt attended through LibTorch's
// fused (flash) SDPA and every other token through kernels/cuda/paged_attention.
// One process, dense models (tensor parallelism and mixtures of experts are refused by name).
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/inference/model.h"
#include "llama/config.h"
#include "llama/model.h"

namespace colossal::llama {

class LlamaCudaInference : public inference::CausalLM {
 public:
  struct Options {
    c10::Device device{c10::kCUDA, 0};
    at::ScalarType dtype = at::kBFloat16;  // the weights, activations and KV cache
  };
  /// Copies (fused, converted) a model's weights to the device.
  LlamaCudaInference(LlamaForCausalLM& model, Options options);
  /// A Hugging Face directory (config.json + safetensors).
  static std::shared_ptr<LlamaCudaInference> load(const std::string& dir, Options options);
  /// infer_llama's --dtype on a GPU: fp32, bf16 or fp16 (int8/int4 are CPU formats: refused by name).
  static at::ScalarType dtype_named(const std::string& name);

  inference::CacheShape cache_shape() const override;
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_positions() const override { return config_.max_position_embeddings; }
  at::Tensor forward(const inference::ModelInput& input, inference::PagedKVCache& cache) override;
  const LlamaConfig& config() const { return config_; }
  /// Bytes of weights one decode step reads (the bandwidth bound of decoding).
  int64_t weight_bytes_per_token() const;

 private:
  struct Layer {
    at::Tensor q_norm, k_norm;  // Qwen3: [head_dim]
    at::Tensor input_norm, post_norm, qkv, qkv_bias, o, o_bias, gate_up, down;
  };
  // How one step's tokens attend, worked out once per forward (the same for every layer): fresh
  // prompts of kSdpaPrefillMin tokens or more through SDPA, the other rows through the paged kernel
  // with their metadata already on the device.
  struct AttentionPlan {
    std::vector<std::pair<int64_t, int64_t>> sdpa;  // [begin, end) rows of fresh prompts
    bool all_paged = false;
    at::Tensor paged_rows, seq, context, block_tables;  // device; paged_rows only when !all_paged
    int64_t paged = 0, max_context = 0;                // paged rows; the longest context among them
  };
  AttentionPlan plan_attention(const inference::ModelInput& in) const;
  at::Tensor attention(const AttentionPlan& plan, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                       inference::PagedKVCache& cache, int64_t layer) const;

  LlamaConfig config_;
  Options options_;
  int64_t heads_ = 0, kv_heads_ = 0, head_dim_ = 0;
  std::vector<Layer> layers_;
  at::Tensor embed_, norm_, lm_head_, cos_, sin_;
};

}  // namespace colossal::llama
