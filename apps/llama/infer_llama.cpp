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
#include <set>
#include <sstream>
#include <iostream>
#include <thread>

#include "apps/common/cli_binder.h"
#include "apps/llama/engine_setup.h"
#include "apps/llama/openai_server.h"
#include "core/dist/collectives.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/context.h"
#include "core/common/check.h"
#include "core/common/progress.h"
#include "core/dist/runtime.h"
#include "core/inference/engine.h"
#include "core/launch/error_file.h"
#include "core/checkpoint/gguf.h"
#include "core/cuda/ops.h"
#include "llama/cuda_inference.h"
#include "llama/dataset.h"
#include "llama/gguf.h"
#include "llama/inference.h"
#include "llama/parallelize.h"
#include "llama/perplexity.h"
#include "llama/tokenizer.h"
#include "text/chat.h"

using namespace colossal;
using namespace colossal::llama;

namespace {

struct Args {
  llama_app::EngineSetup engine;  // model, device, dtype, tp, draft, cache: the one inference setup
  std::vector<std::string> prompt;
  std::string input_file;
  int64_t max_new_tokens = 64;
  // Defaults where neither a flag nor the model's generation_config.json says (no repetition
  // penalty unless asked: greedy text then equals transformers' greedy text).
  double temperature = 0.7, top_p = 0.95, min_p = 0.0, repetition_penalty = 1.0;
  int64_t top_k = 40;
  std::set<std::string> given;  // sampling flags set on the command line
  bool stream = false, chat = false;
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
int serve(const Args& a, inference::Engine& engine, std::shared_ptr<const text::Tokenizer> tok,
          const GenerationDefaults& generation, const std::vector<std::string>& adapter_names) {
  llama_app::ServerOptions o;
  o.host = a.host;
  o.port = a.port;
  o.max_body_bytes = static_cast<int64_t>(a.max_body_mib * (1 << 20));
  o.read_timeout_s = a.read_timeout_s;
  o.shutdown_grace_s = a.shutdown_grace_s;
  o.model_name = a.served_name.empty() ? a.engine.model.substr(a.engine.model.find_last_of('/') + 1) : a.served_name;
  if (o.model_name.empty()) o.model_name = "llama";
  o.adapter_names = adapter_names;
  for (const auto& name : adapter_names)
    COLOSSAL_CHECK(name != o.model_name, "--lora ", name, "=...: the name is the base model's (", o.model_name,
                   "); give the adapter another one or set --served_model_name");
  o.defaults.max_tokens = 16;  // OpenAI's default
  o.defaults.temperature = 1.0;
  o.defaults.top_p = 1.0;
  o.defaults.top_k = 0;
  o.defaults.repetition_penalty = 1.0;
  // A model's generation_config.json replaces OpenAI's defaults for what a request leaves out.
  if (generation.do_sample && !*generation.do_sample) o.defaults.temperature = 0;
  else if (generation.temperature) o.defaults.temperature = *generation.temperature;
  if (generation.top_p) o.defaults.top_p = *generation.top_p;
  if (generation.top_k) o.defaults.top_k = *generation.top_k;
  if (generation.repetition_penalty) o.defaults.repetition_penalty = *generation.repetition_penalty;
  o.step_when_idle = a.engine.tp > 1;
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

// Text as bytes (a model may generate a NUL; printf would stop there).
void print_bytes(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

// Streamed text straight to standard output.
void print_text(const inference::TokenEvent& e) {
  print_bytes(e.text);
  std::fflush(stdout);
}

// The model's generation_config.json fills the sampling flags the command line did not set.
void apply_generation_defaults(Args& a, const GenerationDefaults& g) {
  auto fill = [&](const char* flag, auto& field, const auto& value) {
    if (value && !a.given.count(flag)) field = *value;
  };
  if (g.do_sample && !*g.do_sample && !a.given.count("temperature")) a.temperature = 0;
  else fill("temperature", a.temperature, g.temperature);
  fill("top_p", a.top_p, g.top_p);
  fill("top_k", a.top_k, g.top_k);
  fill("min_p", a.min_p, g.min_p);
  fill("repetition_penalty", a.repetition_penalty, g.repetition_penalty);
  fill("max_new_tokens", a.max_new_tokens, g.max_new_tokens);
}

inference::SamplingParams sampling(const Args& a) {
  inference::SamplingParams p;
  p.temperature = a.temperature;
  p.top_k = a.top_k;
  p.top_p = a.top_p;
  p.min_p = a.min_p;
  p.repetition_penalty = a.repetition_penalty;
  p.max_tokens = a.max_new_tokens;
  p.seed = a.engine.seed;
  return p;
}

int run(Args a) {
  COLOSSAL_CHECK(!(a.engine.tp > 1 && a.chat), "--tp: --chat runs on one process (use --tp 1)");
  auto loaded = llama_app::load_engine(
      a.engine, {.serve = a.serve, .cpu_only = !a.perplexity.empty(),
                 .cpu_only_why = "--perplexity scores on the CPU engine (use --device cpu)"});
  apply_generation_defaults(a, loaded.generation);
  const bool quiet = loaded.follower;
  if (quiet) std::freopen("/dev/null", "w", stdout);
  auto& engine = *loaded.engine;
  const auto& tok = loaded.tokenizer;
  const auto& config = loaded.config();
  const auto& draft = loaded.draft;
  if (!quiet) std::fprintf(stderr, "[infer_llama] %s\n", loaded.description.c_str());
  if (a.serve && a.engine.tp > 1) {
    if (quiet) {  // a follower: step with the leader until it stops
      while (!engine.leader_stopped()) engine.step();
    } else {
      serve(a, engine, tok, loaded.generation, loaded.adapter_names);
      engine.stop_followers();
      engine.step();
    }
    dist::shutdown();
    return 0;
  }
  if (a.serve) return serve(a, engine, tok, loaded.generation, loaded.adapter_names);
  COLOSSAL_CHECK(loaded.adapter_names.empty(), "--lora NAME=DIR: named adapters are served per request (--serve); to "
                 "generate here with one adapter, give --lora DIR (folded into the weights)");
  if (!a.perplexity.empty() && !a.perplexity.ends_with(".jsonl")) {
    // Plain text, scored as llama-perplexity scores it (the figure it prints for the same file).
    std::ifstream in(a.perplexity, std::ios::binary);
    COLOSSAL_CHECK(in.good(), "--perplexity ", a.perplexity, ": cannot read the file");
    std::stringstream text;
    text << in.rdbuf();
    const auto tokens = tok->encode(text.str(), true);
    const auto bos = tok->special_tokens().bos;
    const bool adds_bos = bos && !tokens.empty() && tokens[0] == *bos;
    const int64_t n_ctx = std::min<int64_t>(a.perplexity_length, config.max_position_embeddings);
    auto t0 = std::chrono::steady_clock::now();
    auto r = llama::perplexity_in_chunks(*loaded.model, tokens, n_ctx, adds_bos ? *bos : -1, a.perplexity_samples,
                                         a.perplexity_chunk);
    std::printf("perplexity %.4f (mean loss %.5f nats) over %ld tokens in %ld chunks of %ld (the second half of "
                "each scored, as llama-perplexity does), weights %s, %.1f s\n",
                r.perplexity, r.mean_nll, r.tokens, r.samples, n_ctx,
                kernels::cpu::to_string(loaded.model->options().weight_format()),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  }
  if (!a.perplexity.empty()) {
    // Scored like train_llama's evaluation: samples of --perplexity_length tokens, next-token loss.
    DatasetOptions d;
    d.files = {a.perplexity};
    d.max_length = std::min<int64_t>(a.perplexity_length, config.max_position_embeddings);
    d.cache_dir = "/tmp/colossal_perplexity_cache";
    auto data = TokenDataset::open(d, *tok);
    COLOSSAL_CHECK(data.size() > 0, "--perplexity ", a.perplexity, ": fewer than ", d.max_length, " tokens");
    auto t0 = std::chrono::steady_clock::now();
    auto r = llama::perplexity(*loaded.model, data, a.perplexity_samples, a.perplexity_chunk);
    std::printf("perplexity %.4f (mean loss %.5f nats) over %ld tokens in %ld samples of %ld, weights %s, %s, %.1f s\n",
                r.perplexity, r.mean_nll, r.tokens, r.samples, d.max_length, kernels::cpu::to_string(loaded.model->options().weight_format()),
                a.perplexity_chunk == 0 ? "one forward per sample"
                                        : ("fed " + std::to_string(a.perplexity_chunk) + " token(s) at a time").c_str(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return 0;
  }

  if (a.chat) {
    std::vector<std::pair<std::string, std::string>> history;
    std::string line;
    const bool own_template = !tok->chat_template().empty();
    std::fprintf(stderr, "chat with the model (%s); an empty line or end of input quits\n> ",
                 own_template ? "its chat template" : "no template of its own: LLaMA-2's");
    while (std::getline(std::cin, line) && !line.empty()) {
      history.push_back({"human", line});
      std::vector<int64_t> ids;
      if (own_template) {
        nlohmann::ordered_json messages = nlohmann::ordered_json::array();
        for (const auto& [who, text] : history) messages.push_back({{"role", who == "human" ? "user" : "assistant"}, {"content", text}});
        ids = text::encode_chat(*tok, messages, /*add_generation_prompt=*/true);
      } else {
        for (const auto& seg : apply_chat_template("llama2", history)) {
          // BOS before each human turn, EOS after each reply, where the model has them.
          auto piece = tok->encode_with(seg.text, !seg.assistant, seg.assistant);
          ids.insert(ids.end(), piece.begin(), piece.end());
        }
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
    r.prompt = tok->encode(p, true);
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
    else print_bytes(prompts[i] + results[i].text + "\n");
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
  if (a.engine.tp > 1) dist::shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Generate text with a LLaMA model directory (default: the model train_llama writes)"};
  app.add_option("--prompt", a.prompt, "prompt text (repeat for a batch)");
  app.add_option("--input_file", a.input_file, "one prompt per line, run as a batch");
  // Every number is checked against its range: CLI11 (sampling, server) or the setup's declaration
  // (apps/llama/engine_setup.h) names the flag, the value and the range.
  app.add_option("--max_new_tokens", a.max_new_tokens, "tokens to generate per prompt")
      ->capture_default_str()->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--temperature", a.temperature, "0 means greedy")->capture_default_str()->check(CLI::Range(0.0, 100.0));
  app.add_option("--top_k", a.top_k, "0: off")->capture_default_str()->check(CLI::NonNegativeNumber);
  app.add_option("--top_p", a.top_p, "nucleus sampling (1: off)")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--min_p", a.min_p, "0: off")->capture_default_str()->check(CLI::Range(0.0, 1.0));
  app.add_option("--repetition_penalty", a.repetition_penalty, "1: off")
      ->capture_default_str()->check(CLI::Range(0.01, 100.0));
  app.add_flag("--stream", a.stream, "print tokens as they are generated");
  app.add_flag("--chat", a.chat, "interactive chat through the model's chat template (LLaMA-2's when it has none)");
  apps::CliBinder engine_flags(app);
  a.engine.visit(engine_flags);
  app.add_flag("--serve", a.serve, "run the OpenAI-compatible HTTP server");
  app.add_option("--perplexity", a.perplexity,
                 "score a file instead of generating: a .jsonl file (\"text\" per line) as train_llama's "
                 "evaluation scores it (e.g. out/llama/data/valid.jsonl, the default run's held-out text); any "
                 "other file as plain text, as llama-perplexity scores it (chunks of --perplexity_length tokens, "
                 "BOS first, the second half of each scored: its figure for the same file)");
  app.add_option("--perplexity_length", a.perplexity_length, "tokens per scored sample (llama-perplexity's -c)")
      ->capture_default_str()->check(CLI::Range(int64_t{2}, int64_t{1} << 20));
  app.add_option("--perplexity_chunk", a.perplexity_chunk,
                 "feed each sample N tokens at a time through the KV cache (1: the decode path; 0: one forward)")
      ->capture_default_str()->check(CLI::Range(int64_t{0}, int64_t{1} << 20));
  app.add_option("--perplexity_samples", a.perplexity_samples, "score only the first N samples or chunks (0: all)")
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
  for (const char* flag : {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "max_new_tokens"})
    if (app.count(std::string("--") + flag)) a.given.insert(flag);
  a.engine.dtype_given = app.count("--dtype") > 0;
  if (a.serve) {
    // Before any thread exists (LibTorch's pool included), so every thread inherits the mask and
    // only the server's watcher receives these signals.
    sigset_t set = shutdown_signals();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
  }
  try {
    return run(a);
  } catch (const std::exception& e) {
    const std::string text = error_text(e);
    std::fprintf(stderr, "infer_llama: %s\n", text.c_str());
    launch::record_fatal_error("infer_llama", text);
    return 1;
  }
}
