// The analysis formulas (core/tools/model_analysis.h) against a model defined in the tests (a toy
// LLaMA-shaped transformer, tests/support/toy_transformer.h): its parameter count exactly, and the
// model-state bytes every plugin reports holding after a step within 15%. (LLaMA's own shapes —
// GQA, tied embeddings, experts, fitted activation memory — are checked in tests/llama.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/tools/model_analysis.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_transformer.h"

namespace colossal::testing {
namespace {

int64_t parameters_of(torch::nn::Module& model) {
  int64_t n = 0;
  for (const auto& p : model.parameters()) n += p.numel();
  return n;
}

TEST(ModelAnalysis, ParameterCountsMatchTheToyTransformer) {
  for (const auto& shape : {ToyTransformerShape{}, ToyTransformerShape{.vocab = 50, .hidden = 24, .intermediate = 40,
                                                                         .heads = 3, .layers = 3}}) {
    ToyTransformer model(shape);
    EXPECT_EQ(tools::total_parameters(shape.spec()), parameters_of(*model)) << "hidden " << shape.hidden;
    // By module: the per-module counts add up to the total, one entry per layer part.
    int64_t sum = 0;
    for (const auto& m : tools::parameters_by_module(shape.spec())) sum += m.parameters;
    EXPECT_EQ(sum, parameters_of(*model));
  }
}

// Under tensor parallelism a rank holds its slices: the formula's share (the vocabulary padding of
// the embedding and head aside) is what the toy holds on each rank.
TEST(ModelAnalysisMultiRank, ParametersPerRankUnderTensorParallelism) {
  testing::run_ranks(2, [] {
    booster::PluginConfig config;
    config.name = "hybrid";
    config.layout.tp = 2;
    auto plugin = booster::make_plugin(config);
    const ToyTransformerShape shape{.vocab = 128};  // a multiple of 64 x tp: no padding
    ToyTransformer model(shape, parallel::ParallelContext::from(plugin->dims()));
    tools::Layout l;
    l.plugin = "hybrid";
    l.tp = 2;
    EXPECT_NEAR(tools::parameters_per_rank(shape.spec(), l), static_cast<double>(parameters_of(*model)),
                1e-9 * parameters_of(*model));
  });
}

// Model state per rank as each plugin reports holding it after a step, against the formula: two
// ranks, fp32 and bf16. (Gemini's working set of gathered chunks is reported apart and is not part
// of the formula.)
TEST(ModelAnalysisMultiRank, ModelStateWithinFifteenPercentOfMeasured) {
  testing::run_ranks(2, [] {
    ::setenv("COLOSSAL_CPU_COMPUTE", "low", 1);  // bf16 storage even where this CPU would compute in fp32
    const ToyTransformerShape shape{.vocab = 256, .hidden = 64, .intermediate = 160, .heads = 4, .layers = 2};
    for (const char* plugin : {"ddp", "zero1", "zero2", "gemini"}) {
      for (const char* precision : {"fp32", "bf16"}) {
        torch::manual_seed(0);
        ToyTransformer model(shape);
        auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
        booster::Booster booster(booster::make_plugin(plugin, precision));
        auto b = booster.boost(model.ptr(), opt);
        auto ids = torch::randint(0, shape.vocab, {2, 16});
        b.optimizer->zero_grad();
        booster.backward(model->loss(ids), *b.optimizer);
        b.optimizer->step();
        auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, b.optimizer->inner());
        int64_t measured = report.total();
        for (const auto& [tier, n] : report.bytes["gathered chunks"]) measured -= n;
        tools::Layout l;
        l.plugin = plugin;
        l.dp = 2;
        l.precision = precision;
        int64_t predicted = 0;
        for (const auto& [category, tiers] : tools::model_state_bytes(shape.spec(), l))
          for (const auto& [tier, n] : tiers) predicted += n;
        EXPECT_NEAR(static_cast<double>(predicted), static_cast<double>(measured), 0.15 * measured)
            << plugin << " " << precision << ": predicted " << predicted << ", measured " << measured << "\n"
            << report.format();
      }
    }
  });
}

}  // namespace
}  // namespace colossal::testing
