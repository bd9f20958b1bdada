#pragma once
// An OpenAI-compatible HTTP front end for the generation engine (cpp-httplib):
//   POST /v1/completions, POST /v1/chat/completions   ("stream": true -> server-sent events
//                                                       ending in "data: [DONE]")
//   GET  /v1/models, /health, /metrics (Prometheus text)
// A request's "model" picks the base model or one of the engine's LoRA adapters by name.
// Bad JSON, missing or out-of-range fields and over-long prompts get a 400 with an OpenAI-style
// error body; the server keeps serving. A client that disconnects cancels its request (its KV
// blocks are freed). Bodies that are not UTF-8 get a 400 naming the field, bodies over the
// limit a 413, a known path with the wrong method a 405; a client that stops sending mid-request
// is dropped after the read timeout. stop() (SIGTERM) refuses new requests, lets in-flight ones
// finish, then returns from serve(), closing connections still open after the grace period.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "core/inference/engine.h"
#include "llama/tokenizer.h"

namespace colossal::llama_app {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string model_name = "llama";
  std::vector<std::string> adapter_names;  // multi-LoRA: the engine's adapter i + 1, picked by a request's "model"
  int http_threads = 128;  // each streaming client holds one while it streams
  int64_t max_body_bytes = int64_t{4} << 20;  // larger request bodies get a 413
  double read_timeout_s = 10;                 // a client silent this long mid-request is dropped
  double shutdown_grace_s = 10;               // after stop(), connections still open are closed
  inference::SamplingParams defaults;  // fields a request leaves out
  /// A lockstep leader (tensor-parallel serving) steps its engine at every wake, work or not,
  /// so the followers waiting in the step's broadcast never reach their collective timeout.
  bool step_when_idle = false;
};

class OpenAIServer {
 public:
  OpenAIServer(inference::Engine& engine, std::shared_ptr<const text::Tokenizer> tokenizer, ServerOptions options);
  ~OpenAIServer();
  /// Blocks until stop() has drained the in-flight requests. Throws when the address cannot be
  /// bound.
  void serve();
  /// Safe to call from a signal-watching thread.
  void stop();

  struct State;

 private:
  std::unique_ptr<State> state_;
};

}  // namespace colossal::llama_app
