#pragma once
// The one inference setup: every front end — infer_llama (generation, --chat, --perplexity,
// --serve), the Python colossal.llama.generate / Server / serve — builds its engine here, from
// the same settings declared once (the flags of infer_llama, the keyword arguments in Python), so
// every option (device, GGUF files, tensor parallelism, a draft model, the weight format) works
// from every front end.
//
//   EngineSetup s;                    // or from flags / a Python dict (read_options)
//   s.model = "out/llama/model";
//   auto e = load_engine(s, {});
//   auto results = e.engine->generate({...});
#include <c10/core/Device.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/common/options.h"
#include "core/inference/engine.h"
#include "core/parallel/context.h"
#include "llama/config.h"
#include "llama/cuda_inference.h"
#include "llama/generation_config.h"
#include "llama/inference.h"
#include "llama/tokenizer.h"

namespace colossal::llama_app {

struct EngineSetup {
  std::string model = "out/llama/model";  // a Hugging Face directory or a LLaMA GGUF file
  std::string device = "auto";  // auto: the GPU when one is visible and nothing asks for a CPU-only feature
  std::string dtype = "fp32";   // fp32 | bf16 | fp16 | int8 | int4 (CPU)
  bool dtype_given = false;     // a GGUF file keeps its own format unless a dtype is given (not a setting)
  int tp = 1;                   // tensor-parallel ranks (under colossal run, exactly this many)
  std::string draft_model;      // speculative decoding
  // PEFT LoRA adapters: one DIR is folded into the weights at load; NAME=DIR entries stay apart
  // and each request picks one by name (multi-LoRA serving).
  std::vector<std::string> lora;
  int64_t num_speculative_tokens = 4;
  int64_t kv_cache_mib = 256, block_size = 16, max_batch = 64, max_batched_tokens = 256;
  std::string kv_cache_dtype = "auto";  // auto (fp32 for fp32 weights, bf16 otherwise) | fp32 | bf16 | q8_0
  uint64_t seed = 0;
  int threads = 0;  // compute threads (0: LibTorch's default)
  bool prefix_caching = true;  // the server's automatic prefix caching (not with a draft model)

  template <class V>
  void visit(V& v) {
    const double cores = static_cast<double>(std::max(1u, std::thread::hardware_concurrency()));
    v("model", model,
      "Hugging Face directory with tokenizer.model, or a LLaMA GGUF file (f32, f16, bf16, q8_0, q4_0, Q2_K..Q6_K "
      "and their mixes such as Q4_K_M; its own tokenizer and, without --dtype, its own formats)");
    v("device", device, "auto (the GPU when one is visible and the run needs no CPU-only feature) | cpu | cuda | cuda:N");
    v("dtype", dtype,
      "weights: fp32 | bf16 | fp16 (IEEE half, llama.cpp's f16: exact on CPUs without bf16 units) | int8 | int4 "
      "(CPU; int8/int4: blocks of 32 with fp16 scales, like "
      "llama.cpp's q8_0/q4_0, kept in MODEL/packed-<dtype>.safetensors after the first start); the KV cache is fp32 "
      "for fp32 and bf16 otherwise",
      one_of({"fp32", "bf16", "fp16", "int8", "int4"}));
    v("tp", tp, "tensor-parallel ranks (run under colossal run with as many)", between(1, 1 << 16));
    v("draft_model", draft_model,
      "speculative decoding: a smaller model with the same tokenizer proposes tokens that the model checks in one "
      "pass (greedy output unchanged, sampling from the model's exact distribution)");
    v("lora", lora, "PEFT LoRA adapters (adapter_config.json + adapter_model.safetensors) for --model: one DIR is "
      "folded into the weights at load; NAME=DIR (any number) are kept apart and served together, each request "
      "picking one by its \"model\" field (CPU engine)");
    v("num_speculative_tokens", num_speculative_tokens, "tokens the draft proposes per step", between(1, 64));
    v("kv_cache_mib", kv_cache_mib, "KV cache memory (at most what the machine has available)", between(1, 1 << 30));
    v("kv_cache_dtype", kv_cache_dtype,
      "KV cache storage: auto (fp32 for --dtype fp32, bf16 otherwise) | fp32 | bf16 | q8_0 (CPU engine: int8 with "
      "an fp32 scale per 32 values, 3.6x the tokens of fp32 in the same memory)",
      one_of({"auto", "fp32", "bf16", "q8_0"}));
    v("block_size", block_size, "tokens per KV block", between(1, 4096));
    v("max_batch", max_batch, "sequences per step", between(1, 1 << 16));
    v("max_batched_tokens", max_batched_tokens, "tokens per step (prefill chunk budget)", between(1, 1 << 24));
    v("seed", seed, "random seed (sampling)");
    v("threads", threads, "compute threads (0: LibTorch's default; at most the cores)", between(0, cores));
    v("prefix_caching", prefix_caching,
      "automatic prefix caching when serving: a request whose prompt starts as an earlier one's prefills only the "
      "rest (off under --draft_model; --no_prefix_caching turns it off)",
      alias("!no_prefix_caching"));
  }
};

/// What the front end will do with the engine, where it changes the setup.
struct EngineUse {
  bool serve = false;       // under tp > 1: rank 0 serves, the others step in lockstep with it
  bool cpu_only = false;    // a CPU-engine feature is asked for (perplexity): auto stays on the CPU
  std::string cpu_only_why; // for the error under --device cuda ("--perplexity scores on the CPU engine")
};

struct LoadedEngine {
  std::shared_ptr<const text::Tokenizer> tokenizer;
  llama::GenerationDefaults generation;  // the model directory's generation_config.json
  std::shared_ptr<llama::LlamaInference> model;          // the CPU engine's model (null on a GPU)
  std::shared_ptr<llama::LlamaCudaInference> gpu_model;  // the GPU engine's
  std::shared_ptr<inference::CausalLM> draft;            // speculative decoding, or null
  std::unique_ptr<inference::Engine> engine;
  parallel::ParallelContext parallel;  // tp > 1: the tensor-parallel group
  std::optional<c10::Device> gpu;
  bool follower = false;               // tp > 1: a rank other than 0 (it prints nothing)
  std::string description;             // what was loaded, for a log line
  std::vector<std::string> adapter_names;  // multi-LoRA: adapter i + 1's name (GenerationRequest::adapter)
  const llama::LlamaConfig& config() const { return gpu_model ? gpu_model->config() : model->config(); }
};

/// The settings checked against each other and against this machine (device, dtype, memory).
void validate(const EngineSetup& setup, const EngineUse& use);

/// Loads the model (and draft), the tokenizer and the engine. Under tp > 1 the runtime is brought
/// up (when not already) and every rank loads its slices.
LoadedEngine load_engine(const EngineSetup& setup, const EngineUse& use = {});

}  // namespace colossal::llama_app
