#pragma once
// The generation engine: continuous batching over a paged KV cache.
//
// Every step() builds one model batch under a token budget: first the running sequences (one
// token each when decoding, a chunk of the prompt while prefilling), oldest first, then new
// requests in arrival order while sequences and tokens remain. A long prompt is prefilled in
// chunks, so sequences already decoding keep going. When the cache runs out of blocks the newest
// running sequence is preempted: its blocks are returned and it is recomputed later (its tokens
// so far are kept), so exhaustion slows the batch down instead of failing it. Tokens are sampled
// per sequence (core/inference/sampler.h), streamed through the request's callback with text
// detokenised incrementally (never a split UTF-8 character, never the start of a stop string).
//
// add() and cancel() may be called from other threads while one thread drives step().
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "core/inference/kv_cache.h"
#include "core/inference/model.h"
#include "core/inference/sampler.h"

namespace colossal::inference {

struct EngineOptions {
  KVCacheOptions cache;
  int64_t max_num_seqs = 64;         // sequences in one batch
  int64_t max_batched_tokens = 256;  // tokens in one batch (prefill chunks + decode tokens)
  uint64_t seed = 0;                 // for requests without their own seed
  void validate() const;
};

enum class FinishReason { kNone, kLength, kStop, kEos, kCancelled, kError };
const char* to_string(FinishReason r);  // "length", "stop" (eos and stop), "cancelled", "error"

/// What a request's callback receives: each new token (with the text it completed, possibly
/// empty), and a last event with finished = true.
struct TokenEvent {
  int64_t request_id = 0;
  int64_t token = -1;  // -1 on the final event
  double logprob = 0;
  std::string text;
  bool finished = false;
  FinishReason reason = FinishReason::kNone;
  std::string error;
};

struct GenerationRequest {
  std::vector<int64_t> prompt;
  SamplingParams params;
  std::function<void(const TokenEvent&)> on_event;  // optional; called on the engine thread
};

struct GenerationResult {
  int64_t id = 0;
  std::vector<int64_t> prompt, tokens;  // tokens: generated (eos and stop tokens excluded)
  std::vector<double> logprobs;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  std::string error;
  double time_to_first_token_s = 0, latency_s = 0;
};

struct EngineStats {
  int64_t running = 0, waiting = 0, blocks_used = 0, blocks_total = 0;
  int64_t preemptions = 0, steps = 0, prompt_tokens = 0, generated_tokens = 0;
};

class Engine {
 public:
  Engine(std::shared_ptr<CausalLM> model, std::shared_ptr<const Detokenizer> detokenizer, int64_t eos_id,
         EngineOptions options);
  ~Engine();

  /// Queues a request; throws (naming the field) for invalid sampling parameters, an empty
  /// prompt, or one that can never fit the model's positions or the whole cache.
  int64_t add(GenerationRequest request);
  /// Finishes a request as cancelled at the next step and frees its blocks.
  void cancel(int64_t id);
  bool has_work() const;
  /// One batch; returns the requests that finished in it.
  std::vector<GenerationResult> step();
  /// Adds every request, steps until all are done; results in request order.
  std::vector<GenerationResult> generate(std::vector<GenerationRequest> requests);
  EngineStats stats() const;
  const PagedKVCache& cache() const { return cache_; }

 private:
  struct Sequence;
  void admit_pending();
  void preempt(Sequence& s);
  GenerationResult finish(Sequence& s, FinishReason reason, const std::string& error = "");
  void emit_text(Sequence& s, bool final);
  std::string output_text(Sequence& s) const;

  std::shared_ptr<CausalLM> model_;
  std::shared_ptr<const Detokenizer> detok_;
  int64_t eos_id_;
  EngineOptions options_;
  PagedKVCache cache_;
  std::mt19937_64 seeds_;

  mutable std::mutex mu_;  // guards pending_, cancelled_, next_id_
  std::vector<std::unique_ptr<Sequence>> pending_;
  std::vector<int64_t> cancelled_;
  int64_t next_id_ = 1;

  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // arrival order
  EngineStats stats_;
};

}  // namespace colossal::inference
