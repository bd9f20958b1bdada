// LLaMA split into pipeline stages: each rank builds only its layers (global names), and every
// schedule, run by the pipeline runtime, gives the single-process loss and gradients (relative
// 1e-5, fp32) on the same global batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/runtime.h"
#include "core/parallel/pipeline/runner.h"
#include "llama/model.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

constexpr int kMicro = 4, kRows = 2, kSeq = 12;

LlamaConfig config(int layers) {
  auto c = tiny_test_llama();
  c.num_hidden_layers = layers;
  return c;
}

torch::Tensor tokens(const LlamaConfig& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
  return torch::randint(c.vocab_size, {kMicro * kRows, kSeq}, gen, torch::kInt64);
}

void expect_pipeline_matches_one_process(const std::string& kind, int chunks, int layers) {
  const auto c = config(layers);
  const auto ids = tokens(c);
  torch::manual_seed(5);
  LlamaForCausalLM whole(c);
  auto loss = whole->loss(ids, ids);
  loss.backward();
  std::map<std::string, torch::Tensor> want;
  for (const auto& p : whole->named_parameters()) want[p.key()] = p.value().grad();

  parallel::ParallelContext ctx;
  ctx.pipeline.group = dist::world_group();
  ctx.pipeline.schedule = {.kind = kind, .stages = dist::world_size(), .microbatches = kMicro, .chunks = chunks};
  torch::manual_seed(5);
  LlamaForCausalLM stage(c, ctx);
  // Only this rank's layers exist, under their names in the whole model.
  const auto ranges = ctx.pipeline.layer_ranges(layers);
  int64_t held_layers = 0;
  for (auto [b, e] : ranges) held_layers += e - b;
  EXPECT_EQ(static_cast<int64_t>(stage->model->layers.size()), held_layers);
  EXPECT_EQ(stage->model->embed_tokens.is_empty(), !ctx.pipeline.holds_first());
  EXPECT_EQ(stage->lm_head.is_empty(), !ctx.pipeline.holds_last());
  for (const auto& p : stage->named_parameters()) {
    ASSERT_TRUE(want.count(p.key())) << p.key() << " is not a parameter of the whole model";
    EXPECT_TRUE(torch::equal(p.value(), whole->named_parameters()[p.key()])) << p.key() << " initialised differently";
  }

  parallel::pipeline::StageFunctions fns;
  fns.forward = [&](int chunk, const torch::Tensor& x) { return stage->forward_chunk(chunk, x); };
  fns.loss = [&](const torch::Tensor& logits, const torch::Tensor& labels) { return stage->loss_from_logits(logits, labels); };
  fns.parameters = [&](int chunk) { return stage->chunk_parameters(chunk); };
  parallel::pipeline::PipelineRunner runner(parallel::pipeline::Schedule(ctx.pipeline.schedule), ctx.pipeline.group);
  const auto micro = ids.split(kRows);
  const double got = runner.run(fns, micro, micro);
  EXPECT_NEAR(got, loss.item<double>(), 1e-5 * loss.item<double>()) << kind;
  for (const auto& p : stage->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << kind << ": " << p.key() << " got no gradient";
    EXPECT_TRUE(torch::allclose(p.value().grad(), want[p.key()], 1e-5, 1e-7)) << kind << ": " << p.key();
  }
}

TEST(LlamaPipeline, EveryScheduleOnTwoStagesMatchesOneProcess) {
  testing::run_ranks(2, [] {
    for (auto [kind, chunks] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2},
                                std::pair{"zbh1", 1}, std::pair{"zbv", 2}})
      expect_pipeline_matches_one_process(kind, chunks, /*layers=*/5);
  });
}

TEST(LlamaPipeline, FourStagesWithUnevenLayersMatchOneProcess) {
  testing::run_ranks(4, [] {
    expect_pipeline_matches_one_process("1f1b", 1, /*layers=*/6);
    expect_pipeline_matches_one_process("zbv", 2, /*layers=*/9);
  });
}

TEST(LlamaPipeline, TiedEmbeddingsNeedTheFirstAndLastStageTogether) {
  testing::run_ranks(2, [] {
    auto c = config(4);
    c.tie_word_embeddings = true;
    parallel::ParallelContext ctx;
    ctx.pipeline.group = dist::world_group();
    ctx.pipeline.schedule = {.kind = "1f1b", .stages = 2, .microbatches = 2};
    auto msg = testing::error_message_of([&] { LlamaForCausalLM m(c, ctx); });
    EXPECT_NE(msg.find("tie_word_embeddings with pp 2"), std::string::npos) << msg;
    ctx.pipeline.schedule = {.kind = "zbv", .stages = 2, .microbatches = 2, .chunks = 2};
    LlamaForCausalLM v(c, ctx);  // rank 0 holds both ends of the V: allowed
    if (dist::rank() == 0) EXPECT_FALSE(v->model->embed_tokens.is_empty());
  });
}

}  // namespace
}  // namespace colossal::llama
