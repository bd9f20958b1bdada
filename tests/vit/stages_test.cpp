// ViT split into pipeline stages: each rank builds only its layers (global names, lazily under
// deferred init), and every schedule gives the single-process loss and gradients (relative 1e-5,
// fp32) on the same global batch; through the hybrid plugin, pp x dp with ZeRO-1 follows one
// process for two AdamW steps.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/pipeline/runner.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "vit/model.h"
#include "vit/pipeline.h"

namespace colossal::vit {
namespace {

constexpr int kMicro = 4, kRows = 2;

ViTConfig config(int layers) {
  auto c = ViTConfig::named("nano", 28, 7, 1, 10);
  c.hidden_size = 32;
  c.num_attention_heads = 2;
  c.intermediate_size = 64;
  c.num_hidden_layers = layers;
  return c;
}

std::pair<torch::Tensor, torch::Tensor> batch(int64_t images, int seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return {torch::randn({images, 1, 28, 28}, gen), torch::randint(10, {images}, gen, torch::kInt64)};
}

ViTForImageClassification build(const ViTConfig& c, const parallel::ParallelContext& ctx) {
  torch::manual_seed(5);
  ViTForImageClassification m(c, ctx);
  m->mimetic_init();
  m->sincos_position_init();
  return m;
}

void expect_stages_match_one_process(const std::string& kind, int chunks, int layers) {
  SCOPED_TRACE(kind);
  const auto c = config(layers);
  const auto [pixels, labels] = batch(kMicro * kRows, 3);
  auto whole = build(c, {});
  auto loss = torch::nn::functional::cross_entropy(whole->forward(pixels), labels);
  loss.backward();
  auto whole_params = whole->named_parameters();

  parallel::ParallelContext ctx;
  ctx.pipeline.group = dist::world_group();
  ctx.pipeline.schedule = {.kind = kind, .stages = dist::world_size(), .microbatches = kMicro, .chunks = chunks};
  auto stage = build(c, ctx);
  int64_t held = 0;
  for (auto [b, e] : ctx.pipeline.layer_ranges(layers, stage_costs(c))) held += e - b;
  EXPECT_EQ(static_cast<int64_t>(stage->vit->encoder->layers.size()), held);
  EXPECT_EQ(stage->vit->embeddings.is_empty(), !ctx.pipeline.holds_first());
  EXPECT_EQ(stage->classifier.is_empty(), !ctx.pipeline.holds_last());
  for (const auto& p : stage->named_parameters()) {
    ASSERT_NE(whole_params.find(p.key()), nullptr) << p.key() << " is not a parameter of the whole model";
    EXPECT_TRUE(torch::equal(p.value(), whole_params[p.key()])) << p.key() << " initialised differently";
  }
  parallel::pipeline::PipelineRunner runner(parallel::pipeline::Schedule(ctx.pipeline.schedule), ctx.pipeline.group);
  const double got = runner.run(stage_functions(stage), pixels.split(kRows), labels.split(kRows));
  EXPECT_NEAR(got, loss.item<double>(), 1e-5 * loss.item<double>());
  for (const auto& p : stage->named_parameters()) {
    ASSERT_TRUE(p.value().grad().defined()) << p.key() << " got no gradient";
    const auto& want = whole_params[p.key()].grad();
    EXPECT_LE((p.value().grad() - want).abs().max().item<double>(), 1e-5 * want.abs().max().item<double>() + 1e-7)
        << p.key();
  }
}

TEST(ViTPipeline, EveryScheduleOnTwoStagesMatchesOneProcess) {
  testing::run_ranks(2, [] {
    for (auto [kind, chunks] : {std::pair{"gpipe", 1}, std::pair{"1f1b", 1}, std::pair{"interleaved", 2},
                                std::pair{"zbh1", 1}, std::pair{"zbv", 2}})
      expect_stages_match_one_process(kind, chunks, /*layers=*/5);
  });
}

TEST(ViTPipeline, FourStagesWithUnevenLayersMatchOneProcess) {
  testing::run_ranks(4, [] {
    expect_stages_match_one_process("1f1b", 1, /*layers=*/6);
    expect_stages_match_one_process("zbh1", 1, /*layers=*/7);
  });
}

// pp 2 x dp 2 through the Booster (ZeRO-1 over dp, deferred construction): the losses, the
// clipped norm and the parameters after two AdamW steps against one process on the global batch.
TEST(ViTPipeline, BoosterPpTimesDpFollowsOneProcess) {
  testing::run_ranks(4, [] {
    const auto c = config(4);
    constexpr double kClip = 0.5;
    std::vector<std::pair<torch::Tensor, torch::Tensor>> batches{batch(2 * kMicro * kRows, 40),
                                                                 batch(2 * kMicro * kRows, 41)};
    // The attention key bias has no gradient in exact arithmetic (softmax ignores a shift shared by
    // a row's scores), so rounding noise is all its optimizer sees; Adam with eps 1e-8 would turn
    // that noise into updates near lr. eps 1e-6 keeps them far below the tolerance.
    const auto adam = torch::optim::AdamWOptions(1e-2).eps(1e-6);
    auto ref = build(c, {});
    torch::optim::AdamW ref_opt(ref->parameters(), adam);
    std::vector<double> want_loss, want_norm;
    for (const auto& [x, y] : batches) {
      ref_opt.zero_grad();
      auto loss = torch::nn::functional::cross_entropy(ref->forward(x), y);
      loss.backward();
      want_norm.push_back(torch::nn::utils::clip_grad_norm_(ref->parameters(), kClip));
      ref_opt.step();
      want_loss.push_back(loss.item<double>());
    }

    booster::PluginConfig pc;
    pc.name = "hybrid";
    pc.device = "cpu";
    pc.layout.pp = 2;
    pc.options["pp_schedule"] = "zbh1";
    pc.options["num_microbatches"] = kMicro;
    pc.options["zero_stage"] = 1;
    auto plugin = booster::make_plugin(pc);
    const int dp_rank = plugin->dims().coord(dist::Axis::kDp);
    ViTForImageClassification model{nullptr};
    {
      nn::DeferredInitGuard deferred;  // a stage makes only its own weights, at boost
      model = build(c, plugin->parallel_context());
    }
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(), adam);
    booster::Booster booster(plugin);
    auto b = booster.boost(model.ptr(), opt);
    const auto fns = stage_functions(model);
    for (int step = 0; step < 2; ++step) {
      auto x = batches[step].first.narrow(0, dp_rank * kMicro * kRows, kMicro * kRows);
      auto y = batches[step].second.narrow(0, dp_rank * kMicro * kRows, kMicro * kRows);
      b.optimizer->zero_grad();
      double loss = booster.execute_pipeline(*b.optimizer, fns, x.split(kRows), y.split(kRows));
      const double norm = booster.clip_grad_norm(*b.optimizer, kClip);
      EXPECT_NEAR(norm, want_norm[step], 1e-5 * want_norm[step]) << "step " << step;
      b.optimizer->step();
      auto t = torch::tensor({loss}, torch::kFloat64);
      dist::all_reduce(t, plugin->dims().group(dist::Axis::kDp));
      EXPECT_NEAR(t.item<double>() / 2, want_loss[step], 1e-5 * want_loss[step]) << "step " << step;
    }
    // Adam turns summation-order rounding on near-zero gradients into visible update differences
    // (see the LLaMA pipeline tests): relative 1e-5 and absolute lr / 200.
    auto ref_params = ref->named_parameters();
    for (const auto& p : model->named_parameters())
      EXPECT_TRUE(torch::allclose(p.value(), ref_params[p.key()], 1e-5, 5e-5)) << p.key();
  });
}

TEST(ViTPipeline, TooFewLayersForTheStagesAreNamed) {
  auto c = config(1);
  dist::ParallelDims dims({.pp = 2}, /*world_size=*/2);
  auto msg = testing::error_message_of([&] { check_parallel(c, dims); });
  EXPECT_NE(msg.find("pp 2: the model has 1 layers"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::vit
