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

/// Speculative decoding: a small draft model with the same vocabulary proposes up to
/// `num_tokens` tokens for each decoding sequence (one forward of its own per token, through a KV
/// cache of its own), and the model checks them all in one forward pass through the paged cache:
/// every step yields between one and num_tokens + 1 tokens per sequence. Greedy requests get
/// exactly the tokens of plain greedy decoding; sampled ones are drawn from exactly the model's
/// distribution (sampler.h, verify_drafted).
struct SpeculativeOptions {
  std::shared_ptr<CausalLM> draft;  // null: off
  int64_t num_tokens = 4;
};

/// Several engines stepping as one (tensor-parallel serving: each process holds a shard of the
/// model and every forward is collective). Only the leader takes requests. At the start of each
/// step it sends the requests and cancellations that arrived since the last one (and whether to
/// stop) through `broadcast`; the followers apply them, so every engine admits, schedules,
/// samples (the same seeds) and finishes alike, step for step.
struct LockstepOptions {
  bool leader = true;
  /// The leader's message on every engine (the leader's own argument on the leader; the
  /// followers' is empty and ignored). Unset: no lockstep.
  std::function<std::string(const std::string& message)> broadcast;
};

struct EngineOptions {
  KVCacheOptions cache;
  SpeculativeOptions speculative;  // the draft's cache gets as many blocks of the same size
  LockstepOptions lockstep;
  int64_t max_num_seqs = 64;         // sequences in one batch
  int64_t max_batched_tokens = 256;  // tokens in one batch (prefill chunks + decode tokens)
  // Automatic prefix caching (block_manager.h): a request whose tokens start as an earlier one's
  // (a system prompt, a chat's history, n samples of one prompt) takes that one's computed blocks
  // and prefills only the rest. Off here (an engine whose weights change, as GRPO's rollout, must
  // call clear_prefix_cache()); the server turns it on. Not with speculative decoding.
  bool prefix_caching = false;
  uint64_t seed = 0;                 // for requests without their own seed
  // Ids that end a sequence as the EOS id does (a model whose config lists several, e.g. Llama 3's
  // <|end_of_text|>, <|eom_id|>, <|eot_id|>); ignore_eos covers them too.
  std::vector<int64_t> more_eos_ids;
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
  int64_t adapter = 0;  // multi-LoRA: the model's adapter this request runs under (0: the base alone)
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
  int64_t draft_tokens = 0, accepted_draft_tokens = 0;  // speculative decoding: proposed, kept
  // Prefix caching: prompt tokens admitted (queried) and those served from cached blocks (hits).
  int64_t prefix_cache_queries = 0, prefix_cache_hits = 0, cached_blocks = 0;
  double acceptance_rate() const { return draft_tokens ? static_cast<double>(accepted_draft_tokens) / draft_tokens : 0; }
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
  /// Forgets the cached prefixes (call after the model's weights change).
  void clear_prefix_cache();

  /// Lockstep leader: the next step() tells the followers to stop after it.
  void stop_followers();
  /// Lockstep follower: the leader said stop (its last step has been taken).
  bool leader_stopped() const { return leader_stopped_; }

 private:
  struct Sequence;
  struct Scheduled;
  std::unique_ptr<Sequence> make_sequence(GenerationRequest request, int64_t id, uint64_t seed) const;
  void exchange_arrivals(std::vector<std::unique_ptr<Sequence>>& arrived, std::vector<int64_t>& cancelled);
  void preempt(Sequence& s);
  int64_t take_cached_prefix(Sequence& s);
  void register_computed_blocks(Sequence& s);
  int64_t speculation_for(const Sequence& s, int64_t budget) const;
  void propose_drafts(std::vector<Scheduled>& batch);
  FinishReason append_token(Sequence& s, int64_t token, double logprob, std::string& error);
  GenerationResult finish(Sequence& s, FinishReason reason, const std::string& error = "");
  void emit_text(Sequence& s, bool final);
  std::string output_text(Sequence& s) const;

  std::shared_ptr<CausalLM> model_;
  std::shared_ptr<const Detokenizer> detok_;
  int64_t eos_id_;
  EngineOptions options_;
  PagedKVCache cache_;
  std::unique_ptr<PagedKVCache> draft_cache_;  // speculative decoding only
  std::mt19937_64 seeds_;

  mutable std::mutex mu_;  // guards pending_, cancelled_, next_id_
  std::vector<std::unique_ptr<Sequence>> pending_;
  std::vector<int64_t> cancelled_;
  int64_t next_id_ = 1;
  bool stop_followers_ = false, leader_stopped_ = false;

  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;  // arrival order
  EngineStats stats_;
};

}  // namespace colossal::inference
