// Generation throughput on the LLaMA shapes S and M (random weights), side by side in one run:
//  1. batch 1 through the engine: prompt tokens/s (a 128-token prefill) and decode tokens/s with
//     1 and 2 threads for fp32, bf16, fp16, int8 and int4 weights, against llama.cpp on the same model
//     (converted by its own converter, quantized with --pure, timed by llama-bench: see
//     llama_cpp_peer.h) and against the read bandwidth measured in the same run with the same
//     threads (decode reads every weight once per token: the fraction of it a token's bytes use);
//  2. aggregate tokens/s of 1, 4 and 16 concurrent streams through the OpenAI server (HTTP on
//     localhost) versus a plain LibTorch loop: the model's own forward over the whole sequence
//     for every new token, one request at a time (no KV cache, no batching);
//  3. prefix caching: the time to first token of a request whose 512-token system prompt an
//     earlier one prefilled, against the earlier one's (--prefix).
//
// K-quant dtypes (q4_k_m, q5_k_m, q6_k, q3_k_m, q2_k: llama-quantize's mixes, as people download
// them) need llama.cpp: both engines read the one file llama-quantize writes (shapes whose widths
// are multiples of 256, such as M; llama.cpp falls back to other types elsewhere).
//
//   build/apps/bench_infer [--shapes S,M] [--dtypes fp32,bf16,fp16,int8,int4] [--decode 128] [--streams 1,4,16]
//                          [--llama_cpp auto|off|BIN_DIR] [--prefix 512]
#include <httplib.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <map>
#include <optional>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "apps/bench/bench_util.h"
#include "apps/bench/llama_cpp_peer.h"
#include "apps/llama/openai_server.h"
#include "core/common/check.h"
#include "core/inference/engine.h"
#include "kernels/cpu/prefill_gemm.h"
#include "llama/inference.h"
#include "llama/pretrained.h"
#include "llama/shapes.h"
#include "llama/tokenizer.h"

using namespace colossal;
using namespace colossal::llama;
using colossal::bench::median;
using colossal::bench::split_list;
using colossal::bench::seconds;

namespace {

struct Args {
  std::string shapes = "S,M", dtypes = "fp32,bf16,fp16,int8,int4", streams = "1,4,16";
  int64_t prompt = 128, decode = 128, stream_tokens = 64, stream_requests = 2;
  int parallel = 16;               // sequences decoded together (against llama-batched-bench)
  int64_t parallel_prompt = 32;    // their prompts
  int64_t speculative_tokens = 4;  // the speculative row's draft length
  int64_t prefix = 512;            // the shared system prompt of the prefix-caching row (0: skip it)
  bool skip_server = false;
  std::string llama_cpp = "auto";  // auto: build/find it with scripts/build_llama_cpp.sh; off; or its bin dir
  std::string python = COLOSSAL_DEFAULT_PYTHON;
};

class Ids : public inference::Detokenizer {
 public:
  std::string decode(const std::vector<int64_t>& ids) const override { return std::string(ids.size(), 'x'); }
};

std::vector<int64_t> tokens(int64_t n, int64_t vocab, int64_t salt = 0) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back((i * 7919 + salt * 104729 + 11) % vocab);
  return p;
}

struct SingleRow {
  std::string shape, dtype;
  int threads;
  double prompt_tps, decode_tps, gbps, limit_tps;
  double peer_prompt = 0, peer_decode = 0;  // llama.cpp (0: not run)
};

// The engine's model for a dtype: our packing of the weights, or for a K-quant mix the GGUF file
// llama-quantize wrote (its own formats, tensor by tensor).
std::shared_ptr<LlamaInference> engine_model(LlamaForCausalLM& model, const std::string& dtype,
                                             const std::map<std::string, std::string>& gguf_files) {
  if (!bench::LlamaCppPeer::is_kquant_mix(dtype))
    return std::make_shared<LlamaInference>(model, LlamaInference::Options::named(dtype));
  COLOSSAL_CHECK(gguf_files.count(dtype), "--dtypes ", dtype, ": K-quant files come from llama.cpp's llama-quantize "
                 "(not with --llama_cpp off)");
  return LlamaInference::load_gguf(gguf_files.at(dtype), {});
}

SingleRow single_stream(const std::string& shape, const std::string& dtype, int threads, const Args& a,
                        LlamaForCausalLM& model, const std::map<std::string, std::string>& gguf_files) {
  at::set_num_threads(threads);
  auto inf = engine_model(model, dtype, gguf_files);
  inference::EngineOptions o;
  o.cache.memory_bytes = int64_t{512} << 20;
  o.max_batched_tokens = 512;
  inference::Engine engine(inf, std::make_shared<Ids>(), -1, o);
  auto req = [&](int64_t prompt, int64_t n) {
    inference::GenerationRequest r;
    r.prompt = tokens(prompt, model->config().vocab_size);
    r.params.temperature = 0;
    r.params.max_tokens = n;
    r.params.ignore_eos = true;
    return engine.generate({r})[0];
  };
  (void)req(16, 4);  // warm up
  std::vector<double> prefill, decode;
  for (int i = 0; i < 3; ++i) {
    auto p = req(a.prompt, 1);
    prefill.push_back(a.prompt / p.time_to_first_token_s);
    auto d = req(8, a.decode + 1);
    decode.push_back(a.decode / (d.latency_s - d.time_to_first_token_s));
  }
  SingleRow r{shape, dtype, threads, median(prefill), median(decode), bench::stream_read_gbps(), 0};
  r.limit_tps = r.gbps * 1e9 / static_cast<double>(inf->weight_bytes_per_token());
  return r;
}

// `parallel` sequences decoded together through the engine (all prefilled in one step, then one
// token each per step): aggregate decode tokens/s after the last first token, like
// llama-batched-bench's S_TG.
double parallel_decode_tps(LlamaForCausalLM& model, const std::string& dtype, int parallel, const Args& a,
                           const std::map<std::string, std::string>& gguf_files) {
  auto inf = engine_model(model, dtype, gguf_files);
  inference::EngineOptions o;
  o.cache.memory_bytes = int64_t{512} << 20;
  o.max_batched_tokens = parallel * a.parallel_prompt;
  o.max_num_seqs = parallel;
  inference::Engine engine(inf, std::make_shared<Ids>(), -1, o);
  auto run = [&](int64_t n) {
    std::vector<inference::GenerationRequest> reqs;
    for (int i = 0; i < parallel; ++i) {
      inference::GenerationRequest r;
      r.prompt = tokens(a.parallel_prompt, model->config().vocab_size, i);
      r.params.temperature = 0;
      r.params.max_tokens = n + 1;
      r.params.ignore_eos = true;
      reqs.push_back(r);
    }
    double first = 0, last = 0;
    for (const auto& r : engine.generate(reqs)) {
      first = std::max(first, r.time_to_first_token_s);
      last = std::max(last, r.latency_s);
    }
    return static_cast<double>(parallel * n) / (last - first);
  };
  (void)run(4);  // warm up
  std::vector<double> tps;
  for (int i = 0; i < 3; ++i) tps.push_back(run(a.stream_tokens));
  return median(tps);
}

struct PrefixRow {
  std::string shape, dtype;
  double first_s, second_s;  // time to first token, median of 3
};

// Two requests that share a system prompt of a.prefix tokens (then 16 tokens of their own) through
// an engine with prefix caching on: the second prefills only its own tokens past the shared whole
// blocks. The cache is cleared before each pair.
PrefixRow prefix_row(const std::string& shape, const std::string& dtype, LlamaForCausalLM& model, const Args& a,
                     const std::map<std::string, std::string>& gguf_files) {
  auto inf = engine_model(model, dtype, gguf_files);
  inference::EngineOptions o;
  o.cache.memory_bytes = int64_t{512} << 20;
  o.max_batched_tokens = 2048;
  o.prefix_caching = true;
  inference::Engine engine(inf, std::make_shared<Ids>(), -1, o);
  const int64_t vocab = model->config().vocab_size;
  auto ttft = [&](int64_t system, int64_t user) {
    inference::GenerationRequest r;
    r.prompt = tokens(a.prefix, vocab, system);
    const auto own = tokens(16, vocab, user);
    r.prompt.insert(r.prompt.end(), own.begin(), own.end());
    r.params.temperature = 0;
    r.params.max_tokens = 1;
    return engine.generate({r})[0].time_to_first_token_s;
  };
  (void)ttft(7, 8);  // warm up
  std::vector<double> first, second;
  for (int i = 0; i < 3; ++i) {
    engine.clear_prefix_cache();
    first.push_back(ttft(1, 100 + 2 * i));
    second.push_back(ttft(1, 101 + 2 * i));
  }
  return {shape, dtype, median(first), median(second)};
}

struct SpeculativeRow {
  std::string shape;
  double plain_tps, spec_tps, acceptance, tokens_per_step;
};

// Batch-1 greedy decode of the model in bf16, plainly and with the same weights in int4 as its
// draft (self-speculation through quantization: no second model is needed, and the draft reads a
// quarter of the bytes).
SpeculativeRow speculative_row(const std::string& shape, LlamaForCausalLM& model, const Args& a) {
  auto target = std::make_shared<LlamaInference>(model, LlamaInference::Options::named("bf16"));
  auto draft = std::make_shared<LlamaInference>(model, LlamaInference::Options::named("int4"));
  auto decode_tps = [&](bool speculate, inference::EngineStats* stats) {
    inference::EngineOptions o;
    o.cache.memory_bytes = int64_t{256} << 20;
    if (speculate) {
      o.speculative.draft = draft;
      o.speculative.num_tokens = a.speculative_tokens;
    }
    inference::Engine engine(target, std::make_shared<Ids>(), -1, o);
    std::vector<double> tps;
    for (int i = 0; i < 3; ++i) {
      inference::GenerationRequest r;
      r.prompt = tokens(16, model->config().vocab_size, i);
      r.params.temperature = 0;
      r.params.max_tokens = a.decode + 1;
      r.params.ignore_eos = true;
      auto d = engine.generate({r})[0];
      tps.push_back(static_cast<double>(d.tokens.size() - 1) / (d.latency_s - d.time_to_first_token_s));
    }
    if (stats) *stats = engine.stats();
    return median(tps);
  };
  inference::EngineStats st;
  SpeculativeRow r{shape, decode_tps(false, nullptr), decode_tps(true, &st), st.acceptance_rate(),
                   st.steps ? static_cast<double>(st.generated_tokens) / st.steps : 0.0};
  return r;
}

// Plain LibTorch: full forward over the whole sequence per new token, greedy.
double plain_loop_tps(LlamaForCausalLM& model, int64_t prompt, int64_t n) {
  torch::NoGradGuard no_grad;
  model->eval();
  auto ids = tokens(prompt, model->config().vocab_size);
  double t = seconds([&] {
    for (int64_t i = 0; i < n; ++i) {
      auto logits = model->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0));
      ids.push_back(logits[0][-1].argmax().item<int64_t>());
    }
  });
  return n / t;
}

// A small SentencePiece model so the server can encode prompts (ids stay far below 32000).
std::shared_ptr<Tokenizer> scratch_tokenizer() {
  static std::shared_ptr<Tokenizer> trained;  // once per run: the llama.cpp conversion and the server share it
  if (trained) return trained;
  std::string dir = "/tmp/bench_infer_tok_" + std::to_string(::getpid());
  (void)!std::system(("mkdir -p " + dir).c_str());
  {
    std::ofstream f(dir + "/text.jsonl");
    const char* words[] = {"the", "house", "walked", "quietly", "letter", "morning", "sister", "garden", "reply",
                           "evening", "fortune", "dance", "brother", "village", "carriage", "season"};
    for (int i = 0; i < 3000; ++i) {
      std::string line;
      for (int w = 0; w < 12; ++w) line += std::string(words[(i * 7 + w * 3) % 16]) + (w % 5 == 4 ? ", " : " ");
      f << nlohmann::json{{"text", line}}.dump() << '\n';
    }
  }
  TrainTokenizerOptions o;
  o.vocab_size = 400;
  train_tokenizer({dir + "/text.jsonl"}, dir + "/tok", o);
  trained = std::make_shared<Tokenizer>(Tokenizer::load(dir + "/tok.model"));
  return trained;
}

// Aggregate completion tokens/s of `streams` clients each sending `requests` requests in turn.
double server_tps(int port, int streams, const Args& a) {
  std::atomic<int64_t> produced{0};
  std::atomic<bool> failed{false};
  double t = seconds([&] {
    std::vector<std::thread> clients;
    for (int c = 0; c < streams; ++c)
      clients.emplace_back([&, c] {
        httplib::Client cli("127.0.0.1", port);
        cli.set_read_timeout(600, 0);
        for (int64_t k = 0; k < a.stream_requests; ++k) {
          nlohmann::json body = {{"prompt", "the garden walked quietly in the evening " + std::to_string(c)},
                                 {"max_tokens", a.stream_tokens}, {"temperature", 0}, {"ignore_eos", true}};
          auto res = cli.Post("/v1/completions", body.dump(), "application/json");
          if (!res || res->status != 200) {
            failed = true;
            return;
          }
          produced += nlohmann::json::parse(res->body)["usage"]["completion_tokens"].get<int64_t>();
        }
      });
    for (auto& th : clients) th.join();
  });
  COLOSSAL_CHECK(!failed.load(), "a benchmark request failed");
  return produced.load() / t;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"Generation throughput: batch-1 prompt/decode vs bandwidth limit; concurrent streams vs a plain loop"};
  app.add_option("--shapes", a.shapes)->capture_default_str();
  app.add_option("--dtypes", a.dtypes)->capture_default_str();
  app.add_option("--streams", a.streams)->capture_default_str();
  app.add_option("--prompt", a.prompt, "prefill length")->capture_default_str();
  app.add_option("--decode", a.decode, "decoded tokens per measurement")->capture_default_str();
  app.add_option("--stream_tokens", a.stream_tokens, "tokens per server request")->capture_default_str();
  app.add_option("--stream_requests", a.stream_requests, "requests per client")->capture_default_str();
  app.add_option("--parallel", a.parallel, "sequences decoded together (0: skip that table)")->capture_default_str();
  app.add_option("--parallel_prompt", a.parallel_prompt, "prompt tokens of each of them")->capture_default_str();
  app.add_option("--speculative_tokens", a.speculative_tokens, "draft tokens per step in the speculative row "
                 "(0: skip it)")->capture_default_str();
  app.add_option("--prefix", a.prefix, "shared system prompt of the prefix-caching row (0: skip it)")
      ->capture_default_str();
  app.add_flag("--skip_server", a.skip_server, "only the batch-1 part");
  app.add_option("--llama_cpp", a.llama_cpp, "llama.cpp's bin directory, 'auto' (scripts/build_llama_cpp.sh) or 'off'")
      ->capture_default_str();
  app.add_option("--python", a.python, "the python that runs llama.cpp's converter")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    std::vector<int> thread_counts;
    for (int t : {1, 2})
      if (t <= cores) thread_counts.push_back(t);
    std::optional<bench::LlamaCppPeer> peer;
    if (a.llama_cpp != "off") {
      std::fprintf(stderr, "[bench_infer] llama.cpp (scripts/build_llama_cpp.sh; the first run builds it)...\n");
      peer = bench::LlamaCppPeer::locate(COLOSSAL_SOURCE_DIR, a.python, a.llama_cpp == "auto" ? "" : a.llama_cpp);
    }
    const std::string scratch = "/tmp/bench_infer_" + std::to_string(::getpid());
    std::vector<SingleRow> single;
    std::vector<std::string> server_rows, parallel_rows;
    std::vector<SpeculativeRow> spec_rows;
    std::vector<PrefixRow> prefix_rows;
    for (const auto& shape : split_list(a.shapes)) {
      auto s = benchmark_shape(shape);
      s.config.max_position_embeddings = 1024;
      torch::manual_seed(0);
      LlamaForCausalLM model(s.config);
      const size_t first = single.size();
      std::map<std::string, std::string> files;
      if (peer) {
        // The same weights as a Hugging Face directory, converted by llama.cpp's own tools.
        std::fprintf(stderr, "[bench_infer] %s: llama.cpp conversion...\n", shape.c_str());
        const std::string dir = scratch + "/" + shape;
        auto tok = scratch_tokenizer();
        save_pretrained(model->config(), checkpoint::model_state(*model), dir, {}, tok.get());
        files = peer->convert(dir, dir + "/model", split_list(a.dtypes));
      }
      for (const auto& dtype : split_list(a.dtypes))
        for (int threads : thread_counts) {
          std::fprintf(stderr, "[bench_infer] %s %s %d thread(s)...\n", shape.c_str(), dtype.c_str(), threads);
          single.push_back(single_stream(shape, dtype, threads, a, model, files));
        }
      if (peer) {
        std::fprintf(stderr, "[bench_infer] %s: llama-bench...\n", shape.c_str());
        std::vector<std::string> list;
        for (const auto& [_, f] : files) list.push_back(f);
        auto speeds = peer->bench(list, thread_counts, static_cast<int>(a.prompt), static_cast<int>(a.decode), 3);
        for (size_t i = first; i < single.size(); ++i) {
          auto& r = single[i];
          if (!files.count(r.dtype)) continue;
          const auto& sp = speeds[files[r.dtype]][r.threads];
          r.peer_prompt = sp.prompt_tps;
          r.peer_decode = sp.decode_tps;
        }
        if (a.parallel > 0)
          for (const auto& dtype : split_list(a.dtypes)) {
            if (!files.count(dtype)) continue;
            std::fprintf(stderr, "[bench_infer] %s %s: %d sequences together...\n", shape.c_str(), dtype.c_str(),
                         a.parallel);
            at::set_num_threads(cores);
            const double ours = parallel_decode_tps(model, dtype, a.parallel, a, files);
            const auto theirs = peer->batched(files[dtype], cores, static_cast<int>(a.parallel_prompt),
                                              static_cast<int>(a.stream_tokens), a.parallel);
            char line[256];
            std::snprintf(line, sizeof line, "%-5s %-6s %9d %14.1f %14.1f %8.2fx", shape.c_str(), dtype.c_str(),
                          a.parallel, ours, theirs.decode_tps, ours / theirs.decode_tps);
            parallel_rows.push_back(line);
          }
      }
      if (a.prefix > 0) {
        const std::string dtype = split_list(a.dtypes).front();
        std::fprintf(stderr, "[bench_infer] %s %s: prefix caching...\n", shape.c_str(), dtype.c_str());
        at::set_num_threads(cores);
        prefix_rows.push_back(prefix_row(shape, dtype, model, a, files));
      }
      if (a.speculative_tokens > 0) {
        std::fprintf(stderr, "[bench_infer] %s speculative decoding...\n", shape.c_str());
        at::set_num_threads(cores);
        spec_rows.push_back(speculative_row(shape, model, a));
      }
      if (a.skip_server) continue;
      at::set_num_threads(cores);
      auto tok = scratch_tokenizer();
      auto inf = std::make_shared<LlamaInference>(model, LlamaInference::Options{at::kFloat});
      inference::EngineOptions o;
      o.cache.memory_bytes = int64_t{512} << 20;
      inference::Engine engine(inf, std::make_shared<TokenizerDetokenizer>(tok), tok->eos_id(), o);
      llama_app::ServerOptions so;
      so.port = 18000 + static_cast<int>(::getpid() % 1000);
      llama_app::OpenAIServer server(engine, tok, so);
      std::thread serving([&] { server.serve(); });
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::fprintf(stderr, "[bench_infer] %s plain LibTorch loop...\n", shape.c_str());
      double plain = plain_loop_tps(model, 12, a.stream_tokens);
      for (const auto& k : split_list(a.streams)) {
        std::fprintf(stderr, "[bench_infer] %s server, %s stream(s)...\n", shape.c_str(), k.c_str());
        double tps = server_tps(so.port, std::stoi(k), a);
        char line[256];
        std::snprintf(line, sizeof line, "%-5s %8s %14.1f %14.1f %8.2fx", shape.c_str(), k.c_str(), tps, plain,
                      tps / plain);
        server_rows.push_back(line);
      }
      server.stop();
      serving.join();
    }
    (void)!std::system(("rm -rf " + scratch).c_str());
    namespace kc = kernels::cpu;
    const bool bf16_units = __builtin_cpu_supports("avx512bf16");
    std::printf("matvec kernels on this CPU: fp32 %s, bf16 %s, fp16 %s, int8 %s, int4 %s, K-quants %s; prefill GEMM "
                "%s\n",
                kc::matvec_implementation(kc::WeightFormat::kF32), kc::matvec_implementation(kc::WeightFormat::kBF16),
                kc::matvec_implementation(kc::WeightFormat::kF16),
                kc::matvec_implementation(kc::WeightFormat::kQ8), kc::matvec_implementation(kc::WeightFormat::kQ4),
                kc::matvec_implementation(kc::WeightFormat::kQ4K),
                bf16_units ? "in bf16 (AVX512-BF16)"
                : kc::prefill_gemm_supports(kc::WeightFormat::kQ8)
                    ? "in integers for int8/int4/K-quants (AVX2), fp32 for the others (no bf16 units)"
                    : "in fp32 (no bf16 units)");
    std::printf("\nbatch 1 (prompt %ld tokens; decode %ld tokens), ours median of 3, llama.cpp mean of 3 "
                "(llama-bench); 'of read': decode bytes/s over the streaming read bandwidth\n", a.prompt, a.decode);
    std::printf("%-5s %-6s %7s | %12s %12s %6s | %12s %12s %6s | %9s %8s\n", "shape", "dtype", "threads", "prompt tok/s",
                "llama.cpp", "ratio", "decode tok/s", "llama.cpp", "ratio", "read GB/s", "of read");
    auto ratio = [](double ours, double peer) { return peer > 0 ? ours / peer : 0.0; };
    for (const auto& r : single)
      std::printf("%-5s %-6s %7d | %12.1f %12.1f %5.2fx | %12.1f %12.1f %5.2fx | %9.1f %7.1f%%\n", r.shape.c_str(),
                  r.dtype.c_str(), r.threads, r.prompt_tps, r.peer_prompt, ratio(r.prompt_tps, r.peer_prompt),
                  r.decode_tps, r.peer_decode, ratio(r.decode_tps, r.peer_decode), r.gbps,
                  100 * r.decode_tps / r.limit_tps);
    if (!parallel_rows.empty()) {
      std::printf("\n%d sequences decoded together (prompts of %ld, %ld tokens each, %d threads): aggregate decode "
                  "tok/s, ours (engine) vs llama.cpp (llama-batched-bench)\n", a.parallel, a.parallel_prompt,
                  a.stream_tokens, cores);
      std::printf("%-5s %-6s %9s %14s %14s %9s\n", "shape", "dtype", "sequences", "ours tok/s", "llama.cpp", "ratio");
      for (const auto& l : parallel_rows) std::printf("%s\n", l.c_str());
    }
    if (!prefix_rows.empty()) {
      std::printf("\nprefix caching: two requests sharing a %ld-token system prompt (then 16 tokens each), %d "
                  "threads: time to first token, median of 3\n", a.prefix, cores);
      std::printf("%-5s %-6s %12s %12s %9s\n", "shape", "dtype", "first ms", "second ms", "second/first");
      for (const auto& r : prefix_rows)
        std::printf("%-5s %-6s %12.1f %12.1f %8.3fx\n", r.shape.c_str(), r.dtype.c_str(), 1e3 * r.first_s,
                    1e3 * r.second_s, r.second_s / r.first_s);
    }
    if (!spec_rows.empty()) {
      std::printf("\nspeculative decoding, batch 1 greedy (%ld tokens, %d threads): the model in bf16, its own weights "
                  "in int4 as the draft, %ld tokens a step (random weights: a low acceptance is the weights', not "
                  "the method's)\n", a.decode, cores, a.speculative_tokens);
      std::printf("%-5s %12s %16s %9s %11s %15s\n", "shape", "plain tok/s", "speculative tok/s", "speed-up",
                  "acceptance", "tokens per step");
      for (const auto& r : spec_rows)
        std::printf("%-5s %12.1f %16.1f %8.2fx %10.1f%% %15.2f\n", r.shape.c_str(), r.plain_tps, r.spec_tps,
                    r.spec_tps / r.plain_tps, 100 * r.acceptance, r.tokens_per_step);
    }
    if (!server_rows.empty()) {
      std::printf("\nconcurrent streams through the OpenAI server (fp32, %d threads, %ld tokens per request) vs a "
                  "plain LibTorch loop (full recompute per token, one request at a time)\n", cores, a.stream_tokens);
      std::printf("%-5s %8s %14s %14s %9s\n", "shape", "streams", "server tok/s", "plain tok/s", "ratio");
      for (const auto& l : server_rows) std::printf("%s\n", l.c_str());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_infer: %s\n", error_text(e).c_str());
    return 1;
  }
}
