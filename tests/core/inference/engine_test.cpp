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
