#include "apps/llama/engine_setup.h"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "core/checkpoint/gguf.h"
#include "core/common/check.h"
#include "core/common/progress.h"
#include "core/cuda/ops.h"
#include "core/dist/collectives.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"
#include "core/peft/lora.h"
#include "kernels/cpu/matvec.h"
#include "llama/gguf.h"
#include "llama/parallelize.h"
#include "llama/pretrained.h"

namespace colossal::llama_app {
namespace {

using llama::LlamaCudaInference;
using llama::LlamaInference;

bool uses_gguf(const EngineSetup& s) {
  return llama::is_gguf_path(s.model) || (!s.draft_model.empty() && llama::is_gguf_path(s.draft_model));
}

// Where the engine's model runs. auto: the GPU when one is visible and nothing asked for a CPU
// feature (int8/int4 weights, GGUF files, tp > 1, perplexity); cuda or cuda:N: the GPU, and a
// request it cannot serve is an error naming the setting.
std::optional<c10::Device> gpu_for(const EngineSetup& s, const EngineUse& use) {
  const bool cpu_only = s.dtype == "int8" || s.dtype == "int4" || uses_gguf(s) || s.tp > 1 || use.cpu_only ||
                        s.kv_cache_dtype != "auto";
  if (s.device == "cpu") return std::nullopt;
  if (s.device == "auto") {
    if (cpu_only || !cuda::kernels_usable()) return std::nullopt;
    return c10::Device(c10::kCUDA, 0);
  }
  COLOSSAL_CHECK(s.device == "cuda" || s.device.rfind("cuda:", 0) == 0,
                 "--device: expected auto, cpu, cuda or cuda:N, got '", s.device, "'");
  COLOSSAL_CHECK(cuda::kernels_usable(), "--device ", s.device,
                 ": no CUDA GPU is visible to this process (or the build has no CUDA kernels); use --device cpu");
  COLOSSAL_CHECK(s.dtype != "int8" && s.dtype != "int4", "--dtype ", s.dtype,
                 " is a CPU weight format; on a GPU use fp32, bf16 or fp16 (or --device cpu)");
  COLOSSAL_CHECK(!uses_gguf(s), "--device ", s.device, ": GGUF files run on the CPU engine (use --device cpu)");
  COLOSSAL_CHECK(s.kv_cache_dtype == "auto", "--device ", s.device, ": --kv_cache_dtype ", s.kv_cache_dtype,
                 " is the CPU engine's (the GPU engine's cache takes the weights' dtype); use auto or --device cpu");
  COLOSSAL_CHECK(s.tp == 1, "--device ", s.device, ": the GPU engine runs one process; --tp ", s.tp,
                 " is the CPU engine's (use --device cpu)");
  COLOSSAL_CHECK(!use.cpu_only, use.cpu_only_why);
  const c10::Device device(s.device);
  COLOSSAL_CHECK(device.index() < static_cast<int>(torch::cuda::device_count()), "--device ", s.device, ": only ",
                 torch::cuda::device_count(), " GPU(s) are visible");
  return device.has_index() ? device : c10::Device(c10::kCUDA, 0);
}

// --lora's entries: one plain DIR (folded in), or NAME=DIR pairs (kept apart).
struct LoraEntries {
  std::string folded;
  std::vector<std::pair<std::string, std::string>> named;
};

LoraEntries lora_entries(const std::vector<std::string>& lora) {
  LoraEntries out;
  for (const auto& e : lora) {
    const auto eq = e.find('=');
    if (eq == std::string::npos) {
      COLOSSAL_CHECK(lora.size() == 1, "--lora ", e, ": with several adapters each is NAME=DIR (the name requests "
                     "give as their \"model\"); one DIR alone is folded into the weights");
      out.folded = e;
      continue;
    }
    const std::string name = e.substr(0, eq), dir = e.substr(eq + 1);
    COLOSSAL_CHECK(!name.empty() && !dir.empty(), "--lora ", e, ": expected NAME=DIR");
    for (const auto& [other, _] : out.named)
      COLOSSAL_CHECK(other != name, "--lora: the name '", name, "' is given twice");
    out.named.emplace_back(name, dir);
  }
  return out;
}

// The CPU engine's options: --dtype's weights (or, for a GGUF file without one, the file's), and
// --kv_cache_dtype's cache where it is not auto.
// --kv_cache_dtype's names and the cache dtypes they stand for (fp16: the GPU engine's).
constexpr std::pair<const char*, c10::ScalarType> kCacheDtypes[] = {
    {"fp32", at::kFloat}, {"bf16", at::kBFloat16}, {"q8_0", at::kChar}, {"fp16", at::kHalf}};

LlamaInference::Options cpu_options(const EngineSetup& s, bool file_format = false) {
  auto o = file_format ? LlamaInference::Options{} : LlamaInference::Options::named(s.dtype);
  for (const auto& [name, dtype] : kCacheDtypes)
    if (s.kv_cache_dtype == name) o.kv_cache = dtype;
  return o;
}

// A model directory, or a GGUF file (weights in the file's format unless a dtype says otherwise).
std::shared_ptr<LlamaInference> load_cpu_model(const std::string& path, const EngineSetup& s,
                                               const parallel::ParallelContext& parallel = {},
                                               const std::string& lora = "") {
  if (!lora.empty()) {
    // The base as a training model, the adapter attached and folded in (each rank its slices),
    // then packed for the engine like any model.
    COLOSSAL_CHECK(!llama::is_gguf_path(path), "--lora ", lora, ": adapters apply to a Hugging Face directory, not "
                   "to a GGUF file (", path, ")");
    auto loaded = llama::load_pretrained(path, {}, parallel);
    peft::load_adapter(*loaded.model, lora, {"lm_head"});
    peft::merge_lora(*loaded.model);
    return std::make_shared<LlamaInference>(loaded.model, cpu_options(s));
  }
  if (!llama::is_gguf_path(path)) return LlamaInference::load(path, cpu_options(s), parallel);
  COLOSSAL_CHECK(!parallel.tensor_parallel(), "--tp ", s.tp, ": a GGUF file (", path,
                 ") runs on one process in this version; use --tp 1 or its Hugging Face directory");
  return LlamaInference::load_gguf(path, cpu_options(s, !s.dtype_given));
}

// Multi-LoRA: each adapter attached to a weightless copy of the model (built lazily, never
// read: only its layers' shapes and tensor-parallel slices matter) and kept by the engine.
std::vector<std::string> add_named_adapters(LlamaInference& engine_model, const std::string& path,
                                            const std::vector<std::pair<std::string, std::string>>& named,
                                            const parallel::ParallelContext& parallel) {
  std::vector<std::string> names;
  if (named.empty()) return names;
  COLOSSAL_CHECK(!llama::is_gguf_path(path), "--lora: adapters apply to a Hugging Face directory, not to a GGUF file (",
                 path, ")");
  for (const auto& [name, dir] : named) {
    auto shape = llama::load_pretrained_lazily(path, parallel);
    const auto config = peft::load_adapter(*shape.model, dir, {"lm_head"});
    COLOSSAL_CHECK(config.modules_to_save.empty(), "--lora ", name, "=", dir, ": the adapter also trains ",
                   config.modules_to_save.size(), " module(s) in full (modules_to_save), which requests cannot "
                   "share; serve it alone with --lora ", dir, " (folded into the weights)");
    engine_model.add_adapter(shape.model);
    names.push_back(name);
  }
  return names;
}

}  // namespace

void validate(const EngineSetup& s, const EngineUse& use) {
  validate_options(s);
  (void)lora_entries(s.lora);
  const auto gpu = gpu_for(s, use);
  // The cache is allocated whole: asking for more than the machine has would only fail later.
  const double available_gib = gpu ? 0.0 : available_memory_gib();
  COLOSSAL_CHECK(available_gib <= 0 || static_cast<double>(s.kv_cache_mib) / 1024 < available_gib, "--kv_cache_mib ",
                 s.kv_cache_mib, " (", s.kv_cache_mib / 1024.0, " GiB) is more than this machine's available memory (",
                 available_gib, " GiB)");
}

LoadedEngine load_engine(const EngineSetup& s, const EngineUse& use) {
  validate(s, use);
  if (s.threads > 0) at::set_num_threads(s.threads);
  LoadedEngine out;
  out.gpu = gpu_for(s, use);
  const auto t_load = std::chrono::steady_clock::now();
  // A GGUF file carries its vocabulary; a directory has tokenizer.json or tokenizer.model.
  std::shared_ptr<const text::Tokenizer> tok =
      llama::is_gguf_path(s.model)
          ? std::shared_ptr<const text::Tokenizer>(llama::gguf_text_tokenizer(*checkpoint::GgufFile::open(s.model)))
          : std::shared_ptr<const text::Tokenizer>(llama::load_tokenizer(s.model));
  out.tokenizer = tok;
  // Tensor parallelism: every rank loads its slices and runs the same engine steps in lockstep
  // (identical inputs, the same gathered logits and seeds); rank 0 prints.
  if (s.tp > 1) {
    if (!dist::is_initialized()) dist::init();
    COLOSSAL_CHECK(dist::world_size() == s.tp, "--tp ", s.tp, " needs exactly ", s.tp,
                   " ranks (colossal run --nproc_per_node ", s.tp, " -- infer_llama ...), got ", dist::world_size());
    COLOSSAL_CHECK(!llama::is_gguf_path(s.model), "--tp ", s.tp, ": a GGUF file (", s.model,
                   ") runs on one process in this version; use --tp 1 or its Hugging Face directory");
    auto cfg = llama::LlamaConfig::from_json_file(s.model + "/config.json");
    // The layout owner, not a training plugin: the tp groups are all the engine needs.
    dist::ParallelDims dims({.tp = s.tp});
    llama::check_parallel(cfg, dims);
    out.parallel = parallel::ParallelContext::from(dims);
    out.follower = dist::rank() != 0;
  }
  std::shared_ptr<inference::CausalLM> engine_model;
  if (out.gpu) {
    COLOSSAL_CHECK(s.lora.empty(), "--lora: adapters are served by the CPU engine in this version (use --device cpu)");
    out.gpu_model = LlamaCudaInference::load(s.model, {*out.gpu, LlamaCudaInference::dtype_named(s.dtype)});
    engine_model = out.gpu_model;
  } else {
    const auto lora = lora_entries(s.lora);
    out.model = load_cpu_model(s.model, s, out.parallel, lora.folded);
    out.adapter_names = add_named_adapters(*out.model, s.model, lora.named, out.parallel);
    engine_model = out.model;
  }
  const auto& config = out.config();
  inference::EngineOptions eo;
  eo.cache.block_size = s.block_size;
  eo.cache.memory_bytes = s.kv_cache_mib << 20;
  eo.max_num_seqs = s.max_batch;
  eo.max_batched_tokens = s.max_batched_tokens;
  eo.seed = s.seed;
  double draft_parameters = 0;
  if (!s.draft_model.empty()) {
    // The draft runs whole on every rank (it is small), in the model's weight format and place.
    if (out.gpu) {
      auto d = LlamaCudaInference::load(s.draft_model, {*out.gpu, LlamaCudaInference::dtype_named(s.dtype)});
      draft_parameters = static_cast<double>(d->config().num_parameters());
      out.draft = d;
    } else {
      auto d = load_cpu_model(s.draft_model, s);
      draft_parameters = static_cast<double>(d->config().num_parameters());
      out.draft = d;
    }
    COLOSSAL_CHECK(out.draft->vocab_size() == config.vocab_size, "--draft_model ", s.draft_model,
                   ": its vocabulary has ", out.draft->vocab_size(), " tokens, --model's ", config.vocab_size,
                   " (speculative decoding needs the same tokenizer)");
    eo.speculative.draft = out.draft;
    eo.speculative.num_tokens = s.num_speculative_tokens;
  }
  eo.prefix_caching = use.serve && s.prefix_caching && !eo.speculative.draft;
  if (s.tp > 1 && use.serve) {
    // Rank 0 serves HTTP; every rank's engine steps in lockstep, rank 0's arrivals broadcast
    // at the start of each step.
    eo.lockstep.leader = dist::rank() == 0;
    const dist::Group group = out.parallel.tp;
    eo.lockstep.broadcast = [group](const std::string& message) { return dist::broadcast_text(message, 0, group); };
  }
  // Every id that ends generation: the tokenizer's EOS, the config's list (Llama 3.x), the
  // generation config's.
  if (!llama::is_gguf_path(s.model)) out.generation = llama::GenerationDefaults::read(s.model);
  const int64_t eos = tok->eos_id() >= 0 ? tok->eos_id() : config.eos_token_id;
  const std::vector<const std::vector<int64_t>*> lists = {&config.eos_token_ids, &out.generation.eos_token_ids,
                                                         &tok->special_tokens().eos_ids};
  for (const auto* list : lists)
    for (int64_t id : *list)
      if (id != eos && std::find(eo.more_eos_ids.begin(), eo.more_eos_ids.end(), id) == eo.more_eos_ids.end())
        eo.more_eos_ids.push_back(id);
  out.engine = std::make_unique<inference::Engine>(engine_model, std::make_shared<llama::TokenizerDetokenizer>(tok), eos, eo);
  const std::string weights = out.gpu ? s.dtype + " on " + out.gpu->str()
                                      : std::string(kernels::cpu::to_string(out.model->options().weight_format()));
  const char* cache_name = "?";
  for (const auto& [name, dtype] : kCacheDtypes)
    if (out.engine->cache().shape().dtype == dtype) cache_name = name;
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: %.1fM parameters, %s, %d thread(s), KV cache %ld blocks of %ld tokens in %s (%.0f s to load)",
                s.model.c_str(), config.num_parameters() / 1e6, weights.c_str(), at::get_num_threads(),
                static_cast<long>(out.engine->cache().blocks().num_blocks()), static_cast<long>(s.block_size),
                cache_name,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  out.description = line;
  if (s.tp > 1) out.description = "tensor parallel over " + std::to_string(s.tp) + " ranks; " + out.description;
  if (!out.adapter_names.empty()) {
    out.description += "; LoRA adapters served per request:";
    for (const auto& name : out.adapter_names) out.description += " " + name;
  }
  if (out.draft) {
    std::snprintf(line, sizeof line, "; speculative decoding: %s (%.1fM parameters) proposes %ld token(s) a step",
                  s.draft_model.c_str(), draft_parameters / 1e6, static_cast<long>(s.num_speculative_tokens));
    out.description += line;
  }
  return out;
}

}  // namespace colossal::llama_app
