#include "core/inference/engine.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

#include "core/common/check.h"

namespace colossal::inference {

void EngineOptions::validate() const {
  cache.validate();
  COLOSSAL_CHECK(max_num_seqs >= 1, "[inference] max_num_seqs: expected >= 1, got ", max_num_seqs);
  COLOSSAL_CHECK(max_batched_tokens >= 1, "[inference] max_batched_tokens: expected >= 1, got ", max_batched_tokens);
  COLOSSAL_CHECK(speculative.num_tokens >= 1 && speculative.num_tokens <= 64,
                 "[inference] speculative num_tokens: expected 1..64, got ", speculative.num_tokens);
  COLOSSAL_CHECK(!(prefix_caching && speculative.draft), "[inference] prefix caching and speculative decoding "
                 "together are not supported in this version (the draft's cache would miss the shared prefix)");
}

const char* to_string(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kLength: return "length";
    case FinishReason::kStop:
    case FinishReason::kEos: return "stop";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

struct Engine::Scheduled {
  Sequence* seq;
  int64_t start, len;  // positions [start, start + len) go through the model this step
  int64_t drafts;      // of which the last `drafts` are the draft model's proposals
};

namespace {
// One sequence's part of a model step: `tokens` at positions start, start + 1, ...
struct Feed {
  int64_t seq_id;
  int64_t start;
  std::vector<int64_t> tokens;
  bool sample_last;  // logits after the last token
  bool sample_all;   // logits after every token
  int64_t adapter = 0;
};

// The flattened batch with its block tables, slots and rows to sample.
ModelInput model_input(const BlockManager& blocks, const std::vector<Feed>& feeds) {
  int64_t n = 0, max_blocks = 1;
  for (const auto& f : feeds) {
    n += static_cast<int64_t>(f.tokens.size());
    max_blocks = std::max<int64_t>(max_blocks, static_cast<int64_t>(blocks.table(f.seq_id).size()));
  }
  auto tokens = at::empty({n}, at::kLong), positions = at::empty({n}, at::kLong), slots = at::empty({n}, at::kLong);
  auto token_seq = at::empty({n}, at::kInt), token_ctx = at::empty({n}, at::kInt);
  auto tables = at::zeros({static_cast<int64_t>(feeds.size()), max_blocks}, at::kInt);
  std::vector<int64_t> sample_rows;
  const bool adapted = std::any_of(feeds.begin(), feeds.end(), [](const Feed& f) { return f.adapter > 0; });
  auto adapters = adapted ? at::empty({n}, at::kLong) : at::Tensor();
  int64_t row = 0;
  for (size_t fi = 0; fi < feeds.size(); ++fi) {
    const auto& f = feeds[fi];
    const auto& table = blocks.table(f.seq_id);
    std::copy(table.begin(), table.end(), tables[static_cast<int64_t>(fi)].data_ptr<int32_t>());
    const int64_t len = static_cast<int64_t>(f.tokens.size());
    for (int64_t k = 0; k < len; ++k, ++row) {
      const int64_t pos = f.start + k;
      tokens.data_ptr<int64_t>()[row] = f.tokens[static_cast<size_t>(k)];
      positions.data_ptr<int64_t>()[row] = pos;
      slots.data_ptr<int64_t>()[row] = blocks.slot(f.seq_id, pos);
      token_seq.data_ptr<int32_t>()[row] = static_cast<int32_t>(fi);
      token_ctx.data_ptr<int32_t>()[row] = static_cast<int32_t>(pos + 1);
      if (adapted) adapters.data_ptr<int64_t>()[row] = f.adapter;
      if (f.sample_all || (f.sample_last && k == len - 1)) sample_rows.push_back(row);
    }
  }
  ModelInput in;
  in.tokens = tokens;
  in.positions = positions;
  in.attention = {tables, token_seq, token_ctx, slots};
  in.sample_index = at::tensor(sample_rows, at::kLong);
  in.adapters = adapters;
  return in;
}
}  // namespace

struct Engine::Sequence {
  int64_t id = 0;
  GenerationRequest request;
  std::vector<int64_t> tokens;  // prompt, then generated
  int64_t computed = 0;         // tokens whose keys and values are in the cache
  int64_t draft_computed = 0;   // the same in the draft model's cache
  std::vector<int64_t> drafts;  // this step's proposed tokens and the draft's distributions
  std::vector<TokenDistribution> draft_dists;
  std::vector<int64_t> output;
  std::vector<double> logprobs;
  std::mt19937_64 rng;
  uint64_t seed = 0;   // rng's (sent to lockstep followers)
  std::string text;    // detokenised output (stop string cut)
  size_t emitted = 0;  // bytes of text already streamed
  std::chrono::steady_clock::time_point arrival, first_token;
  bool has_first_token = false;
  // The output is decoded after the last few prompt tokens and their text removed, so a first
  // word keeps its leading space (SentencePiece drops it at the start of a decode).
  std::vector<int64_t> context;
  std::string context_text;
  // Prefix caching: the chained hashes of the token blocks (as far as computed), and how many of
  // the table's blocks are registered in the cache.
  std::vector<uint64_t> block_hashes;
  int64_t registered = 0;
};

namespace {
uint64_t mix(uint64_t h, uint64_t v) {  // splitmix64 of h combined with v
  h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

// Hashes of the first `n` blocks of s's tokens: each covers its tokens, the previous block's
// hash (so the whole prefix), and the adapter the keys were computed under.
void extend_hashes(std::vector<uint64_t>& hashes, const std::vector<int64_t>& tokens, int64_t adapter,
                   int64_t block_size, int64_t n) {
  for (int64_t k = static_cast<int64_t>(hashes.size()); k < n; ++k) {
    uint64_t h = k == 0 ? mix(0xC0105A1ULL, static_cast<uint64_t>(adapter)) : hashes[static_cast<size_t>(k - 1)];
    for (int64_t i = k * block_size; i < (k + 1) * block_size; ++i) h = mix(h, static_cast<uint64_t>(tokens[i]));
    hashes.push_back(h);
  }
}
}  // namespace

// A sequence being admitted starts its table with the cached blocks of its prefix, leaving at
// least its last token to compute (the next token's logits come from it). Returns the blocks taken.
int64_t Engine::take_cached_prefix(Sequence& s) {
  auto& blocks = cache_.blocks();
  if (!options_.prefix_caching || s.computed != 0 || blocks.has(s.id)) return 0;
  const int64_t bs = blocks.block_size(), usable = (static_cast<int64_t>(s.tokens.size()) - 1) / bs;
  extend_hashes(s.block_hashes, s.tokens, s.request.adapter, bs, usable);
  std::vector<uint64_t> wanted(s.block_hashes.begin(), s.block_hashes.begin() + usable);
  const int64_t taken = blocks.take_cached_prefix(s.id, wanted, s.tokens);
  s.computed = taken * bs;
  s.registered = taken;
  return taken;
}

// Registers the blocks of s that became full and computed in this step.
void Engine::register_computed_blocks(Sequence& s) {
  if (!options_.prefix_caching) return;
  auto& blocks = cache_.blocks();
  const int64_t bs = blocks.block_size(), full = s.computed / bs;
  if (full <= s.registered) return;
  extend_hashes(s.block_hashes, s.tokens, s.request.adapter, bs, full);
  for (int64_t k = s.registered; k < full; ++k)
    blocks.register_block(s.id, k, s.block_hashes[static_cast<size_t>(k)], s.tokens.data() + k * bs);
  s.registered = full;
}

void Engine::clear_prefix_cache() { cache_.blocks().clear_cache(); }

namespace {
constexpr size_t kContextTokens = 4;
}  // namespace

std::string Engine::output_text(Sequence& s) const {
  if (s.context.empty() && !s.request.prompt.empty()) {
    size_t k = std::min(kContextTokens, s.request.prompt.size());
    s.context.assign(s.request.prompt.end() - static_cast<std::ptrdiff_t>(k), s.request.prompt.end());
    s.context_text = detok_->decode(s.context);
  }
  std::vector<int64_t> ids = s.context;
  ids.insert(ids.end(), s.output.begin(), s.output.end());
  std::string all = detok_->decode(ids);
  if (all.compare(0, s.context_text.size(), s.context_text) == 0) return all.substr(s.context_text.size());
  return detok_->decode(s.output);  // the context decoded differently joined: fall back
}

Engine::Engine(std::shared_ptr<CausalLM> model, std::shared_ptr<const Detokenizer> detokenizer, int64_t eos_id,
               EngineOptions options)
    : model_(std::move(model)),
      detok_(std::move(detokenizer)),
      eos_id_(eos_id),
      options_((options.validate(), options)),
      cache_(model_->cache_shape(), options_.cache),
      seeds_(options_.seed) {
  if (const auto& draft = options_.speculative.draft) {
    COLOSSAL_CHECK(draft->vocab_size() == model_->vocab_size(), "[inference] the draft model's vocabulary has ",
                   draft->vocab_size(), " tokens, the model's ", model_->vocab_size(),
                   ": speculative decoding needs the same tokenizer");
    KVCacheOptions o = options_.cache;
    o.num_blocks = cache_.blocks().num_blocks();  // as many token slots as the model's cache
    draft_cache_ = std::make_unique<PagedKVCache>(draft->cache_shape(), o);
  }
}

Engine::~Engine() = default;

int64_t Engine::add(GenerationRequest request) {
  request.params.validate();
  const int64_t n = static_cast<int64_t>(request.prompt.size());
  COLOSSAL_CHECK(n >= 1, "[inference] the prompt is empty");
  COLOSSAL_CHECK(request.adapter >= 0 && request.adapter <= model_->num_adapters(), "[inference] adapter ",
                 request.adapter, ": the model holds ", model_->num_adapters(), " LoRA adapter(s)");
  COLOSSAL_CHECK(n < model_->max_positions(), "[inference] the prompt has ", n,
                 " tokens; the model takes at most ", model_->max_positions(), " positions");
  const auto& blocks = cache_.blocks();
  COLOSSAL_CHECK(blocks.blocks_for(n + 1) <= blocks.num_blocks(), "[inference] the prompt has ", n,
                 " tokens and needs ", blocks.blocks_for(n + 1), " KV blocks of ", blocks.block_size(),
                 " tokens; the whole cache has ", blocks.num_blocks(), " (raise the KV cache memory)");
  for (auto t : request.prompt)
    COLOSSAL_CHECK(t >= 0 && t < model_->vocab_size(), "[inference] prompt token ", t, " is outside the vocabulary [0, ",
                   model_->vocab_size(), ")");
  COLOSSAL_CHECK(!options_.lockstep.broadcast || options_.lockstep.leader,
                 "[inference] a lockstep follower takes its requests from the leader");
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t id = next_id_++;
  const uint64_t seed = request.params.seed ? *request.params.seed : seeds_();
  pending_.push_back(make_sequence(std::move(request), id, seed));
  return id;
}

std::unique_ptr<Engine::Sequence> Engine::make_sequence(GenerationRequest request, int64_t id, uint64_t seed) const {
  auto s = std::make_unique<Sequence>();
  s->tokens = request.prompt;
  s->arrival = std::chrono::steady_clock::now();
  s->id = id;
  s->seed = seed;
  s->rng.seed(seed);
  s->request = std::move(request);
  return s;
}

void Engine::stop_followers() {
  std::lock_guard<std::mutex> lock(mu_);
  stop_followers_ = true;
}

void Engine::cancel(int64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_.push_back(id);
}

bool Engine::has_work() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !pending_.empty() || !waiting_.empty() || !running_.empty() || !cancelled_.empty();
}

EngineStats Engine::stats() const {
  EngineStats s = stats_;
  s.running = static_cast<int64_t>(running_.size());
  s.waiting = static_cast<int64_t>(waiting_.size());
  s.blocks_used = cache_.blocks().used_blocks();
  s.blocks_total = cache_.blocks().num_blocks();
  s.cached_blocks = cache_.blocks().cached_blocks();
  return s;
}

// The lockstep message: the arrivals' ids, seeds, prompts and sampling parameters, the
// cancelled ids, and whether the followers stop after this step.
namespace {
class LockstepWriter {
 public:
  template <typename T>
  void pod(const T& v) {
    out.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void text(const std::string& s) {
    pod<uint64_t>(s.size());
    out += s;
  }
  template <typename T>
  void list(const std::vector<T>& v) {
    pod<uint64_t>(v.size());
    for (const auto& x : v) pod(x);
  }
  std::string out;
};

class LockstepReader {
 public:
  explicit LockstepReader(const std::string& in) : in_(in) {}
  template <typename T>
  T pod() {
    COLOSSAL_CHECK(pos_ + sizeof(T) <= in_.size(), "[inference] lockstep: the leader's message is cut short");
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string text() {
    const auto n = pod<uint64_t>();
    COLOSSAL_CHECK(n <= in_.size() - pos_, "[inference] lockstep: the leader's message is cut short");
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  template <typename T>
  std::vector<T> list() {
    std::vector<T> v(pod<uint64_t>());
    for (auto& x : v) x = pod<T>();
    return v;
  }

 private:
  const std::string& in_;
  size_t pos_ = 0;
};

void write_params(LockstepWriter& w, const SamplingParams& p) {
  w.pod(p.temperature);
  w.pod(p.top_k);
  w.pod(p.top_p);
  w.pod(p.min_p);
  w.pod(p.repetition_penalty);
  w.pod(p.presence_penalty);
  w.pod(p.frequency_penalty);
  w.pod(p.max_tokens);
  w.pod<uint64_t>(p.stop.size());
  for (const auto& s : p.stop) w.text(s);
  w.list(p.stop_token_ids);
  w.pod<uint8_t>(p.ignore_eos);
  w.pod<uint8_t>(p.logprobs);
}

SamplingParams read_params(LockstepReader& r) {
  SamplingParams p;
  p.temperature = r.pod<double>();
  p.top_k = r.pod<int64_t>();
  p.top_p = r.pod<double>();
  p.min_p = r.pod<double>();
  p.repetition_penalty = r.pod<double>();
  p.presence_penalty = r.pod<double>();
  p.frequency_penalty = r.pod<double>();
  p.max_tokens = r.pod<int64_t>();
  p.stop.resize(r.pod<uint64_t>());
  for (auto& s : p.stop) s = r.text();
  p.stop_token_ids = r.list<int64_t>();
  p.ignore_eos = r.pod<uint8_t>() != 0;
  p.logprobs = r.pod<uint8_t>() != 0;
  return p;
}
}  // namespace

void Engine::exchange_arrivals(std::vector<std::unique_ptr<Sequence>>& arrived, std::vector<int64_t>& cancelled) {
  const auto& lockstep = options_.lockstep;
  if (!lockstep.broadcast) return;
  LockstepWriter w;
  if (lockstep.leader) {
    bool stop;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop = stop_followers_;
    }
    w.pod<uint64_t>(arrived.size());
    for (const auto& s : arrived) {
      w.pod(s->id);
      w.pod(s->seed);
      w.list(s->request.prompt);
      w.pod(s->request.adapter);
      write_params(w, s->request.params);
    }
    w.list(cancelled);
    w.pod<uint8_t>(stop);
  }
  const std::string message = lockstep.broadcast(w.out);
  if (lockstep.leader) return;
  LockstepReader r(message);
  arrived.clear();
  const auto n = r.pod<uint64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    const auto id = r.pod<int64_t>();
    const auto seed = r.pod<uint64_t>();
    GenerationRequest request;
    request.prompt = r.list<int64_t>();
    request.adapter = r.pod<int64_t>();
    request.params = read_params(r);
    arrived.push_back(make_sequence(std::move(request), id, seed));
  }
  cancelled = r.list<int64_t>();
  leader_stopped_ = r.pod<uint8_t>() != 0;
}

void Engine::preempt(Sequence& s) {
  cache_.blocks().release(s.id);
  if (draft_cache_) draft_cache_->blocks().release(s.id);
  s.computed = 0;
  s.draft_computed = 0;  // recomputed from its tokens (prompt and output so far) when readmitted
  s.registered = 0;
  ++stats_.preemptions;
}

namespace {
// Bytes at the end of `s` that do not yet form a whole UTF-8 character (0 when complete).
size_t incomplete_utf8_tail(const std::string& s) {
  size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return len > back ? back : 0;
  }
  return 0;
}
}  // namespace

// Streams the part of the text that is certain: not a partial character, and not a possible
// beginning of a stop string (unless this is the final event).
void Engine::emit_text(Sequence& s, bool final) {
  size_t upto = s.text.size();
  if (!final) {
    upto -= incomplete_utf8_tail(s.text);
    // A trailing U+FFFD usually means a byte-fallback character still being completed.
    static const std::string kReplacement = "\xEF\xBF\xBD";
    if (upto >= 3 && s.text.compare(upto - 3, 3, kReplacement) == 0) upto -= 3;
    for (const auto& stop : s.request.params.stop)
      for (size_t k = std::min(stop.size() - 1, upto); k > 0; --k)
        if (upto >= s.emitted + k && s.text.compare(upto - k, k, stop, 0, k) == 0) {
          upto -= k;
          break;
        }
  }
  s.emitted = std::max(upto, s.emitted);
}

GenerationResult Engine::finish(Sequence& s, FinishReason reason, const std::string& error) {
  cache_.blocks().release(s.id);
  if (draft_cache_) draft_cache_->blocks().release(s.id);
  GenerationResult r;
  r.id = s.id;
  r.prompt = s.request.prompt;
  r.tokens = s.output;
  r.logprobs = s.logprobs;
  r.text = s.text;
  r.reason = reason;
  r.error = error;
  auto now = std::chrono::steady_clock::now();
  r.latency_s = std::chrono::duration<double>(now - s.arrival).count();
  r.time_to_first_token_s = s.has_first_token ? std::chrono::duration<double>(s.first_token - s.arrival).count() : 0;
  if (s.request.on_event) {
    TokenEvent e;
    e.request_id = s.id;
    e.finished = true;
    e.reason = reason;
    e.error = error;
    size_t before = s.emitted;
    emit_text(s, /*final=*/true);
    e.text = s.text.substr(before, s.emitted - before);
    s.request.on_event(e);
  }
  return r;
}

std::vector<GenerationResult> Engine::step() {
  // What arrived since the last step (in lockstep: what the leader says arrived).
  std::vector<std::unique_ptr<Sequence>> arrived;
  std::vector<int64_t> cancelled;
  {
    std::lock_guard<std::mutex> lock(mu_);
    arrived.swap(pending_);
    cancelled.swap(cancelled_);
  }
  exchange_arrivals(arrived, cancelled);
  for (auto& s : arrived) waiting_.push_back(std::move(s));
  std::vector<GenerationResult> done;

  // Cancellations first: their blocks are free for this step.
  for (int64_t id : cancelled) {
    for (auto it = running_.begin(); it != running_.end(); ++it)
      if ((*it)->id == id) {
        done.push_back(finish(**it, FinishReason::kCancelled));
        running_.erase(it);
        break;
      }
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it)
      if ((*it)->id == id) {
        done.push_back(finish(**it, FinishReason::kCancelled));
        waiting_.erase(it);
        break;
      }
  }

  std::vector<Scheduled> batch;
  int64_t budget = options_.max_batched_tokens;
  auto& blocks = cache_.blocks();

  // 1. Running sequences, oldest first; preempt the newest when blocks run out. A decoding
  // sequence takes 1 + k tokens when the draft proposes k.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& s = *running_[i];
    const int64_t k = speculation_for(s, budget);
    if (k > 0 && blocks.reserve(s.id, s.computed + 1 + k) &&
        draft_cache_->blocks().reserve(s.id, static_cast<int64_t>(s.tokens.size()) + k - 1)) {
      batch.push_back({&s, s.computed, 1 + k, k});
      budget -= 1 + k;
      ++i;
      continue;
    }
    int64_t chunk = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    bool scheduled = false;
    while (!(scheduled = blocks.reserve(s.id, s.computed + chunk))) {
      auto victim = std::move(running_.back());
      running_.pop_back();
      preempt(*victim);
      bool self = victim.get() == &s;
      waiting_.push_front(std::move(victim));
      if (self) break;
    }
    if (!scheduled) break;  // s itself went back to waiting (it was the newest)
    batch.push_back({&s, s.computed, chunk, 0});
    budget -= chunk;
    ++i;
  }
  // 2. Waiting sequences in order, while sequences, tokens and blocks remain.
  while (!waiting_.empty() && budget > 0 && static_cast<int64_t>(running_.size()) < options_.max_num_seqs) {
    Sequence& s = *waiting_.front();
    const int64_t cached = take_cached_prefix(s);
    int64_t chunk = std::min<int64_t>(static_cast<int64_t>(s.tokens.size()) - s.computed, budget);
    if (!blocks.reserve(s.id, s.computed + chunk)) {
      if (cached > 0) {  // it waits: the prefix is taken again when it is admitted
        blocks.release(s.id);
        s.computed = 0;
        s.registered = 0;
      }
      break;
    }
    if (options_.prefix_caching) {
      stats_.prefix_cache_queries += static_cast<int64_t>(s.tokens.size());
      stats_.prefix_cache_hits += s.computed;
    }
    batch.push_back({&s, s.computed, chunk, 0});
    budget -= chunk;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  if (batch.empty()) return done;
  propose_drafts(batch);

  // The model's input: each sequence's tokens from `start` (after its last token, the drafts);
  // logits where a sequence's known tokens end and at every drafted token.
  std::vector<Feed> feeds;
  for (const auto& b : batch) {
    Feed f{b.seq->id, b.start, {}, false, false, b.seq->request.adapter};
    const int64_t known = std::min<int64_t>(b.len, static_cast<int64_t>(b.seq->tokens.size()) - b.start);
    f.tokens.assign(b.seq->tokens.begin() + b.start, b.seq->tokens.begin() + b.start + known);
    f.tokens.insert(f.tokens.end(), b.seq->drafts.begin(), b.seq->drafts.end());
    f.sample_last = b.start + b.len >= static_cast<int64_t>(b.seq->tokens.size());
    f.sample_all = b.drafts > 0;
    feeds.push_back(std::move(f));
  }
  at::Tensor logits = model_->forward(model_input(blocks, feeds), cache_);  // [sampled rows, vocab]
  ++stats_.steps;

  for (const auto& b : batch) {
    b.seq->computed = b.start + b.len;
    register_computed_blocks(*b.seq);
    if (b.start < static_cast<int64_t>(b.seq->request.prompt.size()))
      stats_.prompt_tokens += std::min<int64_t>(b.len, static_cast<int64_t>(b.seq->request.prompt.size()) - b.start);
  }

  // Sample (or verify the drafts), stream, and finish.
  std::vector<Sequence*> finished;
  std::vector<std::pair<FinishReason, std::string>> reasons;
  int64_t row = 0;
  for (size_t bi = 0; bi < batch.size(); ++bi) {
    const auto& b = batch[bi];
    if (!feeds[bi].sample_last) continue;
    Sequence& s = *b.seq;
    const auto& p = s.request.params;
    FinishReason reason = FinishReason::kNone;
    std::string error;
    if (b.drafts == 0) {
      auto dist = token_distribution(logits[row++], p, s.request.prompt, s.output);
      const int64_t token = draw(dist, s.rng);
      reason = append_token(s, token, p.logprobs ? dist.log_softmax(token) : 0.0, error);
    } else {
      // Row j holds the model's distribution after drafts 1..j: keep drafts while they pass,
      // stop at the first replacement; when all pass, row k gives one more token.
      int64_t accepted = 0;
      bool replaced = false;
      for (int64_t j = 0; j <= b.drafts && reason == FinishReason::kNone && !replaced; ++j) {
        auto dist = token_distribution(logits[row + j], p, s.request.prompt, s.output);
        int64_t token;
        if (j < b.drafts) {
          auto v = verify_drafted(dist, s.draft_dists[static_cast<size_t>(j)], s.drafts[static_cast<size_t>(j)], s.rng);
          token = v.token;
          replaced = !v.accepted;
          if (v.accepted) ++accepted;
        } else {
          token = draw(dist, s.rng);
        }
        reason = append_token(s, token, p.logprobs ? dist.log_softmax(token) : 0.0, error);
      }
      row += b.drafts + 1;
      stats_.draft_tokens += b.drafts;
      stats_.accepted_draft_tokens += accepted;
      // The keys and values of rejected drafts are overwritten when those positions come again.
      s.computed = b.start + 1 + accepted;
      s.draft_computed = std::min(s.draft_computed, s.computed);
      s.drafts.clear();
      s.draft_dists.clear();
    }
    if (reason != FinishReason::kNone) {
      finished.push_back(&s);
      reasons.push_back({reason, error});
    }
  }
  for (size_t k = 0; k < finished.size(); ++k) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == finished[k]; });
    done.push_back(finish(**it, reasons[k].first, reasons[k].second));
    running_.erase(it);
  }
  // Sliding window: the next token of a sequence (position `computed`) sees positions from
  // computed - window + 1 on; blocks wholly before that go back to the pool.
  if (const int64_t window = model_->sliding_window(); window > 0)
    for (const auto& s : running_) blocks.release_before(s->id, s->computed - window + 1);
  return done;
}

// How many tokens the draft proposes for `s` this step: 0 unless speculation is on and `s`
// decodes (only its last token is new), at most what it may still generate minus the one the
// check adds, what the token budget leaves, and what both models' positions allow.
int64_t Engine::speculation_for(const Sequence& s, int64_t budget) const {
  if (!draft_cache_ || static_cast<int64_t>(s.tokens.size()) - s.computed != 1) return 0;
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  int64_t k = std::min(options_.speculative.num_tokens, budget - 1);
  k = std::min(k, s.request.params.max_tokens - static_cast<int64_t>(s.output.size()) - 1);
  k = std::min(k, model_->max_positions() - n);
  k = std::min(k, options_.speculative.draft->max_positions() - n + 1);
  return std::max<int64_t>(k, 0);
}

// The draft model catches up on the sequence's tokens it has not seen (the whole prompt the
// first time, then the one or two tokens the last check added) and proposes a token, then one
// more per forward until each sequence has its k, all sequences batched in each forward.
void Engine::propose_drafts(std::vector<Scheduled>& batch) {
  int64_t rounds = 0;
  for (const auto& b : batch) rounds = std::max(rounds, b.drafts);
  auto& draft = *options_.speculative.draft;
  for (int64_t round = 0; round < rounds; ++round) {
    std::vector<Feed> feeds;
    std::vector<Sequence*> fed;
    for (const auto& b : batch) {
      if (b.drafts <= round) continue;
      Sequence& s = *b.seq;
      Feed f{s.id, s.draft_computed, {}, true, false, 0};
      if (round == 0) f.tokens.assign(s.tokens.begin() + s.draft_computed, s.tokens.end());
      else f.tokens = {s.drafts.back()};
      s.draft_computed += static_cast<int64_t>(f.tokens.size());
      feeds.push_back(std::move(f));
      fed.push_back(&s);
    }
    at::Tensor logits = draft.forward(model_input(draft_cache_->blocks(), feeds), *draft_cache_);
    for (size_t i = 0; i < fed.size(); ++i) {
      Sequence& s = *fed[i];
      std::vector<int64_t> output = s.output;
      output.insert(output.end(), s.drafts.begin(), s.drafts.end());
      s.draft_dists.push_back(token_distribution(logits[static_cast<int64_t>(i)], s.request.params, s.request.prompt, output));
      s.drafts.push_back(draw(s.draft_dists.back(), s.rng));
    }
  }
}

// After the model chose `token` for `s`: ends the sequence at eos or a stop token (neither is
// kept), else appends it, updates the text, checks stop strings and the length limits, and
// streams what is certain. Returns why `s` finished (kNone: it goes on).
FinishReason Engine::append_token(Sequence& s, int64_t token, double logprob, std::string& error) {
  const auto& p = s.request.params;
  if (!s.has_first_token) {
    s.has_first_token = true;
    s.first_token = std::chrono::steady_clock::now();
  }
  ++stats_.generated_tokens;
  if (!p.ignore_eos && (token == eos_id_ || std::find(options_.more_eos_ids.begin(), options_.more_eos_ids.end(), token) !=
                                                 options_.more_eos_ids.end()))
    return FinishReason::kEos;
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end())
    return FinishReason::kStop;
  FinishReason reason = FinishReason::kNone;
  size_t before = s.emitted;
  s.tokens.push_back(token);
  s.output.push_back(token);
  s.logprobs.push_back(logprob);
  try {
    s.text = output_text(s);
  } catch (const std::exception& e) {  // this request fails; the engine and the others go on
    reason = FinishReason::kError;
    error = error_text(e);
  }
  for (const auto& stop : reason == FinishReason::kError ? std::vector<std::string>{} : p.stop) {
    auto at = s.text.find(stop, before > stop.size() ? before - stop.size() : 0);
    if (!stop.empty() && at != std::string::npos) {
      s.text.resize(at);
      reason = FinishReason::kStop;
    }
  }
  if (reason == FinishReason::kNone && (static_cast<int64_t>(s.output.size()) >= p.max_tokens ||
                                        static_cast<int64_t>(s.tokens.size()) >= model_->max_positions()))
    reason = FinishReason::kLength;
  if (reason == FinishReason::kNone) emit_text(s, /*final=*/false);
  if (s.request.on_event) {
    TokenEvent e;
    e.request_id = s.id;
    e.token = token;
    e.logprob = logprob;
    e.text = s.text.substr(before, s.emitted - before);
    s.request.on_event(e);
  }
  return reason;
}

std::vector<GenerationResult> Engine::generate(std::vector<GenerationRequest> requests) {
  std::vector<int64_t> ids;
  for (auto& r : requests) ids.push_back(add(std::move(r)));
  std::map<int64_t, GenerationResult> by_id;
  while (has_work())
    for (auto& r : step()) by_id[r.id] = std::move(r);
  std::vector<GenerationResult> out;
  for (int64_t id : ids) out.push_back(std::move(by_id[id]));
  return out;
}

}  // namespace colossal::inference
