// The generation engine (core/inference) on a toy model defined here (tests/support/toy_causal_lm.h):
// greedy output through the paged KV cache equals full recomputation token for token — prompts
// across block boundaries, chunked prefill, mixed prefill and decode batches, preemption when the
// blocks run out; a request alone or batched gives the same tokens; impossible requests are
// refused by name; sampling is seeded; streaming delivers every token.
#include <gtest/gtest.h>

#include "core/inference/engine.h"
#include "tests/support/errors.h"
#include "tests/support/id_detokenizer.h"
#include "tests/support/toy_causal_lm.h"

namespace colossal::inference {
namespace {

using testing::ToyCausalLM;

std::vector<int64_t> prompt_of(int64_t len, int64_t salt) { return testing::prompt_of(len, salt, ToyCausalLM::kVocab); }
using testing::greedy_request;

Engine make_engine(const std::shared_ptr<ToyCausalLM>& m, EngineOptions o) {
  return Engine(m, std::make_shared<testing::IdDetokenizer>(), /*eos_id=*/0, o);
}

TEST(InferenceEngine, PagedGreedyEqualsFullRecomputation) {
  auto m = std::make_shared<ToyCausalLM>();
  for (int64_t block : {4, 16}) {
    for (int64_t budget : {3, 256}) {  // chunked prefill (3 tokens a step) or whole prompts
      EngineOptions o;
      o.cache.block_size = block;
      o.cache.num_blocks = 64;
      o.max_batched_tokens = budget;
      auto engine = make_engine(m, o);
      std::vector<GenerationRequest> reqs = {greedy_request(prompt_of(1, 1), 12), greedy_request(prompt_of(9, 2), 12),
                                             greedy_request(prompt_of(33, 3), 12)};
      auto results = engine.generate(reqs);
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(results[i].tokens, m->greedy(reqs[i].prompt, 12)) << "block " << block << ", budget " << budget
                                                                    << ", prompt " << reqs[i].prompt.size();
      EXPECT_EQ(engine.cache().blocks().used_blocks(), 0) << "every block is returned";
    }
  }
}

TEST(InferenceEngine, AloneOrBatchedGivesTheSameTokens) {
  auto m = std::make_shared<ToyCausalLM>();
  EngineOptions o;
  o.cache.block_size = 8;
  o.cache.num_blocks = 32;
  auto batched = make_engine(m, o).generate(
      {greedy_request(prompt_of(7, 1), 9), greedy_request(prompt_of(20, 2), 9), greedy_request(prompt_of(2, 3), 9)});
  auto alone = make_engine(m, o).generate({greedy_request(prompt_of(20, 2), 9)});
  EXPECT_EQ(alone[0].tokens, batched[1].tokens);
}

TEST(InferenceEngine, PreemptionWhenBlocksRunOutStillGivesTheReference) {
  auto m = std::make_shared<ToyCausalLM>();
  EngineOptions o;
  o.cache.block_size = 4;
  o.cache.num_blocks = 9;  // 36 tokens for three sequences that grow to 26 each
  auto engine = make_engine(m, o);
  std::vector<GenerationRequest> reqs = {greedy_request(prompt_of(10, 4), 16), greedy_request(prompt_of(10, 5), 16),
                                         greedy_request(prompt_of(10, 6), 16)};
  auto results = engine.generate(reqs);
  EXPECT_GT(engine.stats().preemptions, 0) << "the pool is too small for all three at once";
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(results[i].tokens, m->greedy(reqs[i].prompt, 16));
  EXPECT_EQ(engine.cache().blocks().used_blocks(), 0);
}

// Prefix caching: a prompt that starts as an earlier request's prefills only the rest, and every
// output is still the full recomputation's (the toy model reads its keys from the shared blocks).
TEST(InferenceEngine, PrefixCachingServesSharedPrefixesWithTheReferenceTokens) {
  auto m = std::make_shared<ToyCausalLM>();
  EngineOptions o;
  o.cache.block_size = 8;
  o.cache.num_blocks = 24;
  o.prefix_caching = true;
  auto engine = make_engine(m, o);
  auto system = prompt_of(43, 7);  // five whole blocks and three tokens
  auto with = [&](int64_t salt, int64_t extra) {
    auto p = system;
    auto tail = prompt_of(extra, salt);
    p.insert(p.end(), tail.begin(), tail.end());
    return p;
  };
  auto first = engine.generate({greedy_request(with(1, 6), 10)});
  EXPECT_EQ(first[0].tokens, m->greedy(with(1, 6), 10));
  EXPECT_EQ(engine.stats().prefix_cache_hits, 0);
  // Two more with the same system prompt, and one unrelated: 40 tokens (5 blocks) served each.
  std::vector<GenerationRequest> reqs = {greedy_request(with(2, 9), 10), greedy_request(prompt_of(30, 9), 10),
                                         greedy_request(with(3, 1), 10)};
  auto results = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(results[i].tokens, m->greedy(reqs[i].prompt, 10)) << i;
  EXPECT_EQ(engine.stats().prefix_cache_hits, 80);
  // The same prompt again: all of it cached but the last block, which is computed again (its last
  // token gives the first output's logits).
  const int64_t before = engine.stats().prefix_cache_hits;
  auto again = engine.generate({greedy_request(with(1, 6), 10)});
  EXPECT_EQ(again[0].tokens, first[0].tokens);
  EXPECT_EQ(engine.stats().prefix_cache_hits - before, 48) << "49 tokens: 6 whole blocks, the last one recomputed";
  EXPECT_EQ(engine.cache().blocks().used_blocks(), 0) << "no block is held after the requests end";
  EXPECT_GT(engine.stats().cached_blocks, 0) << "but their keys stay cached";
  engine.clear_prefix_cache();
  const int64_t cleared = engine.stats().prefix_cache_hits;
  engine.generate({greedy_request(with(4, 2), 4)});
  EXPECT_EQ(engine.stats().prefix_cache_hits, cleared) << "nothing is served after clear_prefix_cache()";
  // A pool too small for everything: cached blocks are evicted and sequences preempted, and the
  // tokens stay the reference's.
  EngineOptions small = o;
  small.cache.num_blocks = 12;
  auto tight = make_engine(m, small);
  std::vector<GenerationRequest> many;
  for (int64_t i = 0; i < 4; ++i) many.push_back(greedy_request(with(10 + i, 5), 12));
  tight.generate({many[0]});
  auto out = tight.generate(many);
  for (size_t i = 0; i < many.size(); ++i) EXPECT_EQ(out[i].tokens, m->greedy(many[i].prompt, 12)) << i;
  EXPECT_GT(tight.stats().prefix_cache_hits, 0);
  // Not with speculative decoding.
  EngineOptions spec = o;
  spec.speculative.draft = std::make_shared<ToyCausalLM>(5);
  auto msg = testing::error_message_of([&] { make_engine(m, spec); });
  EXPECT_NE(msg.find("prefix caching and speculative decoding"), std::string::npos) << msg;
}

TEST(InferenceEngine, RequestsThatCanNeverRunAreRefusedByName) {
  auto m = std::make_shared<ToyCausalLM>();
  EngineOptions o;
  o.cache.block_size = 4;
  o.cache.num_blocks = 3;
  auto engine = make_engine(m, o);
  auto msg = testing::error_message_of([&] { engine.add(greedy_request(prompt_of(20, 0), 4)); });
  EXPECT_NE(msg.find("the prompt has 20 tokens and needs 6 KV blocks of 4 tokens; the whole cache has 3"),
            std::string::npos) << msg;
  msg = testing::error_message_of([&] { engine.add(greedy_request({}, 4)); });
  EXPECT_NE(msg.find("the prompt is empty"), std::string::npos) << msg;
  auto bad = greedy_request(prompt_of(3, 0), 4);
  bad.params.top_p = 0;
  msg = testing::error_message_of([&] { engine.add(bad); });
  EXPECT_NE(msg.find("top_p: expected in (0, 1], got 0"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { engine.add(greedy_request({5, 200}, 4)); });
  EXPECT_NE(msg.find("prompt token 200 is outside the vocabulary [0, 61)"), std::string::npos) << msg;
}

TEST(InferenceEngine, SamplingIsSeededStopsWhereAskedAndStreamsEveryToken) {
  auto m = std::make_shared<ToyCausalLM>();
  EngineOptions o;
  o.cache.num_blocks = 32;
  auto run = [&](SamplingParams p, std::function<void(const TokenEvent&)> on_event = {}) {
    GenerationRequest r;
    r.prompt = prompt_of(5, 9);
    r.params = p;
    r.on_event = std::move(on_event);
    return make_engine(m, o).generate({r})[0];
  };
  SamplingParams p;
  p.temperature = 1.0;
  p.max_tokens = 12;
  p.ignore_eos = true;
  p.seed = 5;
  const auto a = run(p);
  EXPECT_EQ(run(p).tokens, a.tokens) << "same seed, same tokens";
  p.seed = 6;
  EXPECT_NE(run(p).tokens, a.tokens) << "another seed, other tokens";
  p.top_k = 1;  // greedy whatever the temperature
  EXPECT_EQ(run(p).tokens, m->greedy(prompt_of(5, 9), 12));
  std::string streamed;
  int tokens = 0, finals = 0;
  const auto streamed_result = run(p, [&](const TokenEvent& e) {
    streamed += e.text;
    (e.finished ? finals : tokens) += 1;
  });
  EXPECT_EQ(tokens, 12);
  EXPECT_EQ(finals, 1);
  EXPECT_EQ(streamed, streamed_result.text);
}

}  // namespace
}  // namespace colossal::inference
