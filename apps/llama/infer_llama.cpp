// infer_llama: generate text with a LLaMA model directory through the paged-KV-cache engine
// (core/inference): continuous batching, chunked prefill, sampling controls, streaming.
//
//   build/apps/infer_llama --prompt "It is a truth universally acknowledged"   # out/llama/model
//   build/apps/infer_llama --model DIR --input_file prompts.txt --temperature 0.8 --top_p 0.95
//   build/apps/infer_llama --chat                                               # interactive
//   build/apps/infer_llama --model BIG --draft_model out/llama/model --num_speculative_tokens 4
//   colossal run --nproc_per_node 2 -- infer_llama --tp 2 --prompt "..."        # tensor parallel
//   colossal run --nproc_per_node 2 -- infer_llama --tp 2 --serve              # rank 0 serves HTTP
// Generated text goes to standard output; logs and the closing throughput figures go to standard
// error, so the output pipes cleanly.
#include <pthread.h>
#include <signal.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <iostream>
#include <thread>

#include "apps/llama/openai_server.h"
#include "core/dist/collectives.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/context.h"
#include "core/common/check.h"
#include "core/common/progress.h"
#include "core/dist/runtime.h"
#include "core/inference/engine.h"
#include "core/checkpoint/gguf.h"
#include "core/cuda/ops.h"
#include "llama/cuda_inference.h"
#include "llama/dataset.h"
#include "llama/gguf.h"
#include "llama/inference.h"
#include "llama/parallelize.h"
#include "llama/perplexity.h"
#include "llama/tokenizer.h"

using namespace colossal;
using namespace colossal::llama;

namespace {

struct Args {
  std::string model = "out/llama/model";
  std::vector<std::string> prompt;
  std::string input_file;
  int64_t max_new_tokens = 64;
  double temperature = 0.7, top_p = 0.95, min_p = 0.0, repetition_penalty = 1.1;
  int64_t top_k = 40;
  uint64_t seed = 0;
  bool stream = false, chat = false;
  int threads = 0;
  int tp = 1;  // tensor-parallel ranks (under colossal run, exactly this many)
  std::string device = "auto";  // auto: the GPU when one is visible and the run can use it
  std::string dtype = "fp32";
  bool dtype_given = false;  // a GGUF file keeps its own format unless --dtype is given
  std::string draft_model;  // speculative decoding
  int64_t num_speculative_tokens = 4;
  int64_t kv_cache_mib = 256, block_size = 16, max_batch = 64, max_batched_tokens = 256;
  bool serve = false;
  std::string perplexity;  // a JSONL file ("text") scored instead of generating
  int64_t perplexity_length = 512, perplexity_samples = 0, perplexity_chunk = 0;
  std::string host = "127.0.0.1", served_name;
  int port = 8000;
  double max_body_mib = 4, read_timeout_s = 10, shutdown_grace_s = 10;
};

sigset_t shutdown_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// The OpenAI-compatible server until SIGTERM or SIGINT, which drain in-flight requests first.
int serve(const Args& a, inference::Engine& engine, std::shared_ptr<const Tokenizer> tok) {
  llama_app::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.max_body_bytes = static_cast<int64_t>(a.max_body_mib * (1 << 20));
  o.read_timeout_s = a.read_timeout_s;
  o.shutdown_grace_s = a.shutdown_grace_s;
  o.model_name = a.served_name.empty() ? a.model.substr(a.model.find_last_of('/') + 1) : a.served_name;
  if (o.model_name.empty()) o.model_name = "llama";
  o.defaults.max_tokens = 16;  // OpenAI's default
  o.defaults.temperature = 1.0;
  o.defaults.top_p = 1.0;
  o.defaults.top_k = 0;
  o.defaults.repetition_penalty = 1.0;
  o.step_when_idle = a.tp > 1;
  llama_app::OpenAIServer server(engine, tok, o);
  // Signals (blocked in every thread since main started) go to one thread that asks the server
  // to drain and stop.
  sigset_t set = shutdown_signals();
  std::thread watcher([&] {
    int sig = 0;
    sigwait(&set, &sig);
    std::fprintf(stderr, "[infer_llama] %s: finishing in-flight requests, then exiting\n", strsignal(sig));
    server.stop();
  });
  watcher.detach();
  server.serve();
  std::fprintf(stderr, "[infer_llama] stopped\n");
  return 0;
}

// Streamed text straight to standard output.
void print_text(const inference::TokenEvent& e) {
  std::fputs(e.text.c_str(), stdout);
  std::fflush(stdout);
}

inference::SamplingParams sampling(const Args& a) {
  inference::SamplingParams p;
  p.temperature = a.temperature;
  p.top_k = a.top_k;
  p.top_p = a.top_p;
  p.min_p = a.min_p;
  p.repetition_penalty = a.repetition_penalty;
  p.max_tokens = a.max_new_tokens;
  p.seed = a.seed;
  return p;
}

// A model directory, or a GGUF file (weights in the file's format unless --dtype says otherwise).
std::shared_ptr<LlamaInference> load_model(const std::string& path, const Args& a,
                                           const parallel::ParallelContext& parallel = {}) {
  if (!is_gguf_path(path)) return LlamaInference::load(path, LlamaInference::Options::named(a.dtype), parallel);
  COLOSSAL_CHECK(!parallel.tensor_parallel(), "--tp ", a.tp, ": a GGUF file (", path,
                 ") runs on one process in this version; use --tp 1 or its Hugging Face directory");
  return LlamaInference::load_gguf(path, a.dtype_given ? LlamaInference::Options::named(a.dtype)
                                                       : LlamaInference::Options{});
}

// Where the engine's model runs. auto: the GPU when one is visible and nothing asked for a CPU
// feature (int8/int4 weights, GGUF files, --tp, --perplexity); cuda or cuda:N: the GPU, and a
// request it cannot serve is an error naming the flag.
std::optional<c10::Device> gpu_for(const Args& a) {
  const bool cpu_only = a.dtype == "int8" || a.dtype == "int4" || is_gguf_path(a.model) || a.tp > 1 ||
                        !a.perplexity.empty() || (!a.draft_model.empty() && is_gguf_path(a.draft_model));
  if (a.device == "cpu") return std::nullopt;
  if (a.device == "auto") {
    if (cpu_only || !cuda::kernels_usable()) return std::nullopt;
    return c10::Device(c10::kCUDA, 0);
  }
  COLOSSAL_CHECK(a.device == "cuda" || a.device.rfind("cuda:", 0) == 0, "--device: expected auto, cpu, cuda or cuda:N, got '",
                 a.device, "'");
  COLOSSAL_CHECK(cuda::kernels_usable(), "--device ", a.device,
                 ": no CUDA GPU is visible to this process (or the build has no CUDA kernels); use --device cpu");
  COLOSSAL_CHECK(a.dtype != "int8" && a.dtype != "int4", "--dtype ", a.dtype,
                 " is a CPU weight format; on a GPU use fp32, bf16 or fp16 (or --device cpu)");
  COLOSSAL_CHECK(!is_gguf_path(a.model) && !(!a.draft_model.empty() && is_gguf_path(a.draft_model)),
                 "--device ", a.device, ": GGUF files run on the CPU engine (use --device cpu)");
  COLOSSAL_CHECK(a.tp == 1, "--device ", a.device, ": the GPU engine runs one process; --tp ", a.tp,
                 " is the CPU engine's (use --device cpu)");
  COLOSSAL_CHECK(a.perplexity.empty(), "--perplexity scores on the CPU engine (use --device cpu)");
  const c10::Device device(a.device);
  COLOSSAL_CHECK(device.index() < static_cast<int>(torch::cuda::device_count()), "--device ", a.device, ": only ",
                 torch::cuda::device_count(), " GPU(s) are visible");
  return device.has_index() ? device : c10::Device(c10::kCUDA, 0);
}

int run(const Args& a) {
  if (a.threads > 0) at::set_num_threads(a.threads);
  const auto gpu = gpu_for(a);
  COLOSSAL_CHECK(a.dtype == "fp32" || a.dtype == "bf16" || a.dtype == "int8" || a.dtype == "int4" ||
                     (gpu && a.dtype == "fp16"),
                 "--dtype: expected fp32, bf16, int8 or int4 (fp16 too on a GPU), got '", a.dtype, "'");
  // The cache is allocated whole: asking for more than the machine has would only fail later.
  const double available_gib = gpu ? 0.0 : colossal::available_memory_gib();
  COLOSSAL_CHECK(available_gib <= 0 || static_cast<double>(a.kv_cache_mib) / 1024 < available_gib, "--kv_cache_mib ",
                 a.kv_cache_mib, " (", a.kv_cache_mib / 1024.0, " GiB) is more than this machine's available memory (",
                 available_gib, " GiB)");
  auto t_load = std::chrono::steady_clock::now();
  // A GGUF file carries its vocabulary; a directory has tokenizer.model.
  auto tok = std::make_shared<Tokenizer>(is_gguf_path(a.model)
                                             ? gguf_tokenizer(*checkpoint::GgufFile::open(a.model))
                                             : Tokenizer::load(a.model + "/tokenizer.model"));
  // Tensor parallelism: every rank loads its slices and runs the same engine steps in lockstep
  // (identical inputs, the same gathered logits and seeds); rank 0 prints.
  parallel::ParallelContext parallel;
  bool quiet = false;
  if (a.tp > 1) {
    COLOSSAL_CHECK(!a.chat, "--tp: --chat runs on one process (use --tp 1)");
    dist::init();
    COLOSSAL_CHECK(dist::world_size() == a.tp, "--tp ", a.tp, " needs exactly ", a.tp,
                   " ranks (colossal run --nproc_per_node ", a.tp, " -- infer_llama ...), got ", dist::world_size());
    COLOSSAL_CHECK(!is_gguf_path(a.model), "--tp ", a.tp, ": a GGUF file (", a.model,
                   ") runs on one process in this version; use --tp 1 or its Hugging Face directory");
    auto cfg = LlamaConfig::from_json_file(a.model + "/config.json");
    // The layout owner, not a training plugin: the tp groups are all the engine needs.
    dist::ParallelDims dims({.tp = a.tp});
    check_parallel(cfg, dims);
    parallel = parallel::ParallelContext::from(dims);
    quiet = dist::rank() != 0;
    if (quiet) std::freopen("/dev/null", "w", stdout);
  }
  std::shared_ptr<LlamaInference> model;           // the CPU engine's model, or
  std::shared_ptr<LlamaCudaInference> gpu_model;   // the GPU's
  std::shared_ptr<inference::CausalLM> engine_model;
  if (gpu) {
    gpu_model = LlamaCudaInference::load(a.model, {*gpu, LlamaCudaInference::dtype_named(a.dtype)});
    engine_model = gpu_model;
  } else {
    model = load_model(a.model, a, parallel);
    engine_model = model;
  }
  const LlamaConfig& config = gpu ? gpu_model->config() : model->config();
  const std::string weights = gpu ? a.dtype + " on " + gpu->str()
                                  : std::string(kernels::cpu::to_string(model->options().weight_format()));
  inference::EngineOptions eo;
  eo.cache.block_size = a.block_size;
  eo.cache.memory_bytes = a.kv_cache_mib << 20;
  eo.max_num_seqs = a.max_batch;
  eo.max_batched_tokens = a.max_batched_tokens;
  eo.seed = a.seed;
  std::shared_ptr<inference::CausalLM> draft;
  double draft_parameters = 0;
  if (!a.draft_model.empty()) {
    // The draft runs whole on every rank (it is small), in the model's weight format and place.
    if (gpu) {
      auto d = LlamaCudaInference::load(a.draft_model, {*gpu, LlamaCudaInference::dtype_named(a.dtype)});
      draft_parameters = static_cast<double>(d->config().num_parameters());
      draft = d;
    } else {
      auto d = load_model(a.draft_model, a);
      draft_parameters = static_cast<double>(d->config().num_parameters());
      draft = d;
    }
    COLOSSAL_CHECK(draft->vocab_size() == config.vocab_size, "--draft_model ", a.draft_model,
                   ": its vocabulary has ", draft->vocab_size(), " tokens, --model's ",
                   config.vocab_size, " (speculative decoding needs the same tokenizer)");
    eo.speculative.draft = draft;
    eo.speculative.num_tokens = a.num_speculative_tokens;
  }
  if (a.tp > 1 && a.serve) {
    // Rank 0 serves HTTP; every rank's engine steps in lockstep, rank 0's arrivals broadcast
    // at the start of each step.
    eo.lockstep.leader = dist::rank() == 0;
    const dist::Group group = parallel.tp;
    eo.lockstep.broadcast = [group](const std::string& message) { return dist::broadcast_text(message, 0, group); };
  }
  inference::Engine engine(engine_model, std::make_shared<TokenizerDetokenizer>(tok), tok->eos_id(), eo);
  if (a.tp > 1 && !quiet) std::fprintf(stderr, "[infer_llama] tensor parallel over %d ranks\n", a.tp);
  if (!quiet) std::fprintf(stderr, "[infer_llama] %s: %.1fM parameters, %s, %d thread(s), KV cache %ld blocks of %ld tokens (%.0f s to load)\n",
               a.model.c_str(), config.num_parameters() / 1e6, weights.c_str(), at::get_num_threads(),
               engine.cache().blocks().num_blocks(), a.block_size,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count());
  if (draft && !quiet)
    std::fprintf(stderr, "[infer_llama] speculative decoding: %s (%.1fM parameters) proposes %ld token(s) a step\n",
                 a.draft_model.c_str(), draft_parameters / 1e6, a.num_speculative_tokens);
  if (a.serve && a.tp > 1) {
    if (quiet) {  // a follower: step with the leader until it stops
      while (!engine.leader_stopped()) engine.step();
    } else {
      serve(a, engine, tok);
      engine.stop_followers();
      engine.step();
    }
    dist::shutdown();
    return 0;
  }
  if (a.serve) return serve(a, engine, tok);
  if (!a.perplexity.empty()) {
    // Scored like train_llama's evaluation: samples of --perplexity_length tokens, next-token loss.
    DatasetOptions d;
    d.files = {a.perplexity};
    d.max_length = std::min<int64_t>(a.perplexity_length, config.max_position_embeddings);
    d.cache_dir = "/tmp/colossal_perplexity_cache";
    auto data = TokenDataset::open(d, *tok);
    COLOSSAL_CHECK(data.size() > 0, "--perplexity ", a.perplexity, ": fewer than ", d.max_length, " tokens");
    auto t0 = std::chrono::steady_clock::now();
    auto r = llama::perplexity(*model, data, a.perplexity_samples, a.perplexity_chunk);
    std::printf("perplexity %.4f (mean loss %.5f nats) over %ld tokens in %ld samples of %ld, weights %s, %s, %.1f s\n",
                r.perplexity, r.mean_nll, r.tokens, r.samples, d.max_length, kernels::cpu::to_string(model->options().weight_format()),
                a.perplexity_chunk == 0 ? "one forward per sample"
                                        : ("fed " + std::to_string(a.perplexity_chunk) + " token(s) at a time").c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  }

  if (a.chat) {
    std::vector<std::pair<std::string, std::string>> history;
    std::string line;
    std::fprintf(stderr, "chat with the model (LLaMA-2 template); an empty line or end of input quits\n> ");
    while (std::getline(std::cin, line) && !line.empty()) {
      history.push_back({"human", line});
      std::vector<int64_t> ids;
      for (const auto& seg : apply_chat_template("llama2", history)) {
        auto piece = tok->encode(seg.text, false, false);
        if (!seg.assistant) ids.push_back(tok->bos_id());
        ids.insert(ids.end(), piece.begin(), piece.end());
        if (seg.assistant) ids.push_back(tok->eos_id());
      }
      inference::GenerationRequest r{ids, sampling(a), print_text};
      auto result = engine.generate({r})[0];
      std::printf("\n");
      history.push_back({"assistant", result.text});
      std::fprintf(stderr, "> ");
    }
    return 0;
  }

  std::vector<std::string> prompts = a.prompt;
  if (!a.input_file.empty()) {
    std::ifstream in(a.input_file);
    COLOSSAL_CHECK(in.good(), "--input_file: cannot read '", a.input_file, "'");
    std::string line;
    while (std::getline(in, line))
      if (!line.empty()) prompts.push_back(line);
  }
  if (prompts.empty()) prompts = {"It is a truth universally acknowledged"};
  COLOSSAL_CHECK(!(a.stream && prompts.size() > 1), "--stream takes one prompt (batches print whole results)");

  std::vector<inference::GenerationRequest> reqs;
  int64_t prompt_tokens = 0;
  for (const auto& p : prompts) {
    inference::GenerationRequest r;
    r.prompt = tok->encode(p, true, false);
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    r.params = sampling(a);
    if (a.stream) {
      std::printf("%s", p.c_str());
      r.on_event = print_text;
    }
    reqs.push_back(std::move(r));
  }
  auto t0 = std::chrono::steady_clock::now();
  auto results = engine.generate(std::move(reqs));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t generated = 0;
  double ttft = 0;
  for (size_t i = 0; i < results.size(); ++i) {
    generated += static_cast<int64_t>(results[i].tokens.size());
    ttft = std::max(ttft, results[i].time_to_first_token_s);
    if (a.stream) std::printf("\n");
    else std::printf("%s%s\n", prompts[i].c_str(), results[i].text.c_str());
  }
  std::fflush(stdout);
  if (!quiet) std::fprintf(stderr, "[infer_llama] %zu prompt(s): %ld prompt tokens (%.1f tokens/s to the last first token), "
               "%ld generated in %.2f s (%.1f tokens/s)\n", prompts.size(), prompt_tokens,
               ttft > 0 ? prompt_tokens / ttft : 0.0, generated, seconds, generated / seconds);
  if (draft && !quiet) {
    auto st = engine.stats();
    std::fprintf(stderr, "[infer_llama] speculative: %ld of %ld drafted tokens accepted (%.1f%%), %.2f tokens per step\n",
                 st.accepted_draft_tokens, st.draft_tokens, 100 * st.acceptance_rate(),
                 st.steps ? static_cast<double>(st.generated_tokens) / st.steps : 0.0);
  }
  if (a.tp > 1) dist::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Generate text with a LLaMA model directory (default: the model train_llama writes)"};
  app.add_option("--model", a.model,
                 "Hugging Face directory with tokenizer.model, or a LLaMA GGUF file (f32, f16, bf16, q8_0, q4_0; "
                 "its own tokenizer and, without --dtype, its own format)")->capture_default_str();
  app.add_option("--prompt", a.prompt, "prompt text (repeat for a batch)");
  app.add_option("--input_file", a.input_file, "one prompt per line, run as a batch");
  // Every number is checked against its range here: CLI11 names the flag, the value and the range.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  app.add_option("--max_new_tokens", a.max_new_tokens, "tokens to generate per prompt")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--temperature", a.temperature, "0 means greedy")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--top_k", a.top_k, "0: off")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top_p", a.top_p, "nucleus sampling (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--min_p", a.min_p, "0: off")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--repetition_penalty", a.repetition_penalty, "1: off")
      ->capture_default_str()->check(CLI::Range(0.01, 100.0));
  app.add_option("--seed", a.seed, "random seed")->capture_default_str();
  app.add_flag("--stream", a.stream, "print tokens as they are generated");
  app.add_flag("--chat", a.chat, "interactive chat with the LLaMA-2 template");
  app.add_option("--threads", a.threads, "compute threads (0: LibTorch's default; at most the cores)")
      ->capture_default_str()->check(CLI::Range(0, cores));
  app.add_option("--tp", a.tp, "tensor-parallel ranks (run under colossal run with as many)")
      ->capture_default_str()->check(CLI::Range(1, 1 << 16));
  app.add_option("--device", a.device,
                 "auto (the GPU when one is visible and the run needs no CPU-only feature) | cpu | cuda | cuda:N")
      ->capture_default_str();
  app.add_option("--dtype", a.dtype,
                 "weights: fp32 | bf16 | fp16 (GPU) | int8 | int4 (CPU; int8/int4: blocks of 32 with fp16 scales, like llama.cpp's "
                 "q8_0/q4_0, kept in MODEL/packed-<dtype>.safetensors after the first start); the KV cache is fp32 "
                 "for fp32 and bf16 otherwise")->capture_default_str();
  app.add_option("--draft_model", a.draft_model,
                 "speculative decoding: a smaller model directory with the same tokenizer proposes tokens that "
                 "--model checks in one pass (greedy output unchanged, sampling from --model's exact distribution)");
  app.add_option("--num_speculative_tokens", a.num_speculative_tokens, "tokens the draft proposes per step")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{64}));
  app.add_option("--kv_cache_mib", a.kv_cache_mib, "KV cache memory (at most what the machine has available)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 30));
  app.add_option("--block_size", a.block_size, "tokens per KV block")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{4096}));
  app.add_option("--max_batch", a.max_batch, "sequences per step")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--max_batched_tokens", a.max_batched_tokens, "tokens per step (prefill chunk budget)")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_flag("--serve", a.serve, "run the OpenAI-compatible HTTP server");
  app.add_option("--perplexity", a.perplexity,
                 "score a JSONL file (\"text\" per line) instead of generating: perplexity as train_llama's "
                 "evaluation computes it (e.g. out/llama/data/valid.jsonl, the default run's held-out text)");
  app.add_option("--perplexity_length", a.perplexity_length, "tokens per scored sample")
      ->capture_default_str()->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--perplexity_chunk", a.perplexity_chunk,
                 "feed each sample N tokens at a time through the KV cache (1: the decode path; 0: one forward)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--perplexity_samples", a.perplexity_samples, "score only the first N samples (0: all)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 40));
  app.add_option("--host", a.host, "address to listen on")->capture_default_str();
  app.add_option("--port", a.port, "port to listen on")->capture_default_str()->check(CLI::Range(1, 65535));
  app.add_option("--served_model_name", a.served_name, "model name in the API (default: the directory's name)");
  app.add_option("--max_body_mib", a.max_body_mib, "largest request body; larger ones get a 413")
      ->capture_default_str()->check(CLI::Range(0.001, 1024.0));
  app.add_option("--read_timeout", a.read_timeout_s, "seconds a client may stay silent in the middle of a request")
      ->capture_default_str()->check(CLI::Range(0.1, 3600.0));
  app.add_option("--shutdown_grace", a.shutdown_grace_s,
                 "seconds after SIGTERM (once in-flight requests are answered) before open connections are closed")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  CLI11_PARSE(app, argc, argv);
  a.dtype_given = app.count("--dtype") > 0;
  if (a.serve) {
    // Before any thread exists (LibTorch's pool included), so every thread inherits the mask and
    // only the server's watcher receives these signals.
    sigset_t set = shutdown_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "infer_llama: %s\n", error_text(e).c_str());
    return 1;
  }
}
