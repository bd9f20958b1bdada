// Lazy construction of a ViT: built under nn::DeferredInitGuard it holds no weights, and boost()
// materialises what the rank keeps with exactly the eager model's values — mimetic attention
// and sine-cosine positions included — under ZeRO-3 (shards), tensor parallelism (slices) and
// DDP (replicas); the first step's loss is the same.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "tests/support/multirank.h"
#include "vit/model.h"

namespace colossal::vit {
namespace {

ViTConfig nano() { return ViTConfig::named("nano", 28, 7, 1, 10); }

ViTForImageClassification build(bool lazy, const parallel::ParallelContext& ctx) {
  torch::manual_seed(5);
  ViTForImageClassification model{nullptr};
  {
    std::optional<nn::DeferredInitGuard> deferred;
    if (lazy) deferred.emplace();
    model = ViTForImageClassification(nano(), ctx);
  }
  model->mimetic_init();
  model->sincos_position_init();
  return model;
}

struct Boosted {
  ViTForImageClassification model{nullptr};
  std::unique_ptr<booster::Booster> booster;
  booster::Boosted b;
};

Boosted boost(bool lazy, const booster::PluginConfig& c) {
  Boosted out;
  auto plugin = booster::make_plugin(c);
  out.model = build(lazy, parallel::ParallelContext::from(plugin->dims()));
  EXPECT_EQ(nn::has_deferred_parameters(*out.model), lazy);
  auto opt = std::make_shared<torch::optim::AdamW>(out.model->parameters(), torch::optim::AdamWOptions(1e-2));
  out.booster = std::make_unique<booster::Booster>(plugin);
  out.b = out.booster->boost(out.model.ptr(), opt);
  // What the optimizer steps has memory (Gemini's released chunks give theirs back by design,
  // so the model's parameters themselves may look deferred between uses).
  for (const auto& g : out.b.optimizer->inner().param_groups())
    for (const auto& p : g.params()) EXPECT_FALSE(nn::is_deferred(p)) << c.describe();
  return out;
}

std::vector<torch::Tensor> held(Boosted& r) {
  std::vector<torch::Tensor> out;
  for (const auto& g : r.b.optimizer->inner().param_groups())
    for (const auto& p : g.params()) out.push_back(p.detach().clone());
  return out;
}

double step(Boosted& r) {
  auto gen = torch::make_generator<at::CPUGeneratorImpl>(3);
  auto pixels = torch::randn({4, 1, 28, 28}, gen);
  auto labels = torch::randint(10, {4}, gen, torch::kInt64);
  r.b.optimizer->zero_grad();
  auto loss = torch::cross_entropy_loss(r.model->forward(pixels), labels);
  r.booster->backward(loss, *r.b.optimizer);
  r.b.optimizer->step();
  return loss.item<double>();
}

void expect_same_holdings(const booster::PluginConfig& c) {
  auto eager = boost(false, c), lazy = boost(true, c);
  auto a = held(eager), b = held(lazy);
  ASSERT_EQ(a.size(), b.size()) << c.describe();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << c.describe() << ": tensor " << i;
  auto fa = eager.b.optimizer->model_wrapper().checkpoint().full_model_state(*eager.model);
  auto fb = lazy.b.optimizer->model_wrapper().checkpoint().full_model_state(*lazy.model);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) EXPECT_TRUE(torch::equal(fa[i].second, fb[i].second)) << fa[i].first;
  EXPECT_EQ(step(eager), step(lazy)) << c.describe() << ": the first step's loss";
}

booster::PluginConfig config(const std::string& name, int tp = 1) {
  booster::PluginConfig c;
  c.name = name;
  c.device = "cpu";
  c.layout.tp = tp;
  if (name == "gemini") c.options["check_first_step"] = false;  // builds one chunk at a time
  return c;
}

TEST(ViTMultiRank, LazyConstructionHoldsTheEagerModelsValues) {
  testing::run_ranks(2, [] {
    expect_same_holdings(config("gemini"));
    expect_same_holdings(config("hybrid", 2));
    expect_same_holdings(config("ddp"));
  });
}

// The values do not depend on how the model is split: a tp=2 rank's slices of the mimetic
// weights are those of a one-process model built from the same seed.
TEST(ViTMultiRank, InitialisationIsTheSameForEveryTensorParallelSize) {
  testing::run_ranks(2, [] {
    auto plugin = booster::make_plugin(config("hybrid", 2));
    auto split = build(false, parallel::ParallelContext::from(plugin->dims()));
    auto whole = build(false, {});
    const int r = dist::rank();
    auto& q_split = split->vit->encoder->layers[1]->attention->attention->query->weight;
    auto& q_whole = whole->vit->encoder->layers[1]->attention->attention->query->weight;
    const int64_t rows = q_split.size(0);
    EXPECT_TRUE(torch::equal(q_split, q_whole.narrow(0, r * rows, rows)));
    EXPECT_TRUE(torch::equal(split->vit->embeddings->position_embeddings, whole->vit->embeddings->position_embeddings));
  });
}

}  // namespace
}  // namespace colossal::vit
