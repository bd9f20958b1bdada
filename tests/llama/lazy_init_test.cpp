// Lazy construction: a LLaMA built under nn::DeferredInitGuard holds no weights; boost()
// materialises only what the rank keeps, with exactly the values the eager model (same seed)
// holds there — ZeRO-3 shards, tensor-parallel slices, DDP replicas — and trains the same.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/checkpoint/model_io.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/tensor/shard.h"
#include "llama/model.h"
#include "llama/pretrained.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
// Named, not anonymous: the unity build compiles this file with others (cmake/unity.cmake).
namespace lazy_init_test {

LlamaConfig tiny() { return tiny_test_llama(); }

LlamaForCausalLM build(bool lazy, const parallel::ParallelContext& ctx = {}) {
  torch::manual_seed(5);
  if (!lazy) return LlamaForCausalLM(tiny(), ctx);
  nn::DeferredInitGuard deferred;
  return LlamaForCausalLM(tiny(), ctx);
}

struct Boosted {
  LlamaForCausalLM model{nullptr};
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
  EXPECT_FALSE(nn::has_deferred_parameters(*out.model));
  return out;
}

// What this rank holds for the optimizer (ZeRO-3: its shards; otherwise its parameters).
std::vector<torch::Tensor> held(Boosted& r) {
  std::vector<torch::Tensor> out;
  for (const auto& g : r.b.optimizer->inner().param_groups())
    for (const auto& p : g.params()) out.push_back(p.detach().clone());
  return out;
}

double step(Boosted& r) {
  auto ids = torch::randint(tiny().vocab_size, {2, 16}, torch::make_generator<at::CPUGeneratorImpl>(3), torch::kInt64);
  r.b.optimizer->zero_grad();
  auto loss = r.model->loss(ids, ids);
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
  auto a2 = held(eager), b2 = held(lazy);
  for (size_t i = 0; i < a2.size(); ++i) EXPECT_TRUE(torch::equal(a2[i], b2[i])) << c.describe() << ": after a step";
}

booster::PluginConfig config(const std::string& name, int tp = 1) {
  booster::PluginConfig c;
  c.name = name;
  c.device = "cpu";
  c.layout.tp = tp;
  if (name == "gemini") c.options["check_first_step"] = false;  // builds one chunk at a time
  return c;
}

TEST(LazyInit, ZeroThreeShardsHoldTheEagerModelsValues) {
  testing::run_ranks(2, [] {
    expect_same_holdings(config("gemini"));
    auto c = config("gemini");
    c.options["check_first_step"] = true;  // every chunk kept gathered in the first step
    expect_same_holdings(c);
  });
}

TEST(LazyInit, TensorParallelSlicesAndReplicasHoldTheEagerModelsValues) {
  testing::run_ranks(2, [] {
    expect_same_holdings(config("hybrid", 2));  // each rank its slices
    expect_same_holdings(config("ddp"));
    expect_same_holdings(config("zero2"));
  });
}

// A Hugging Face directory loaded lazily: each parameter read from the mapped files only when
// boost() places it, straight into the rank's ZeRO-3 shard or tensor-parallel slice.
TEST(LazyInit, PretrainedWeightsLoadStraightIntoShardsAndSlices) {
  const int owner = testing::is_rank_process() ? ::getppid() : ::getpid();
  const std::string dir = ::testing::TempDir() + "lazy_pretrained_" + std::to_string(owner);
  testing::run_ranks(2, [dir] {
    if (dist::rank() == 0) {
      torch::manual_seed(11);
      LlamaForCausalLM source(tiny());
      save_pretrained(tiny(), checkpoint::model_state(*source), dir);
    }
    dist::barrier(dist::world_group());
    for (auto c : {config("gemini"), config("hybrid", 2), config("ddp")}) {
      auto plugin_eager = booster::make_plugin(c);
      const auto ctx = parallel::ParallelContext::from(plugin_eager->dims());
      auto eager = load_pretrained(dir, {}, ctx).model;
      auto lazy = load_pretrained_lazily(dir, ctx).model;
      EXPECT_TRUE(nn::has_deferred_parameters(*lazy));
      auto boost_one = [&](LlamaForCausalLM& m, std::shared_ptr<booster::Plugin> p) {
        auto opt = std::make_shared<torch::optim::AdamW>(m->parameters(), torch::optim::AdamWOptions(1e-2));
        Boosted r;
        r.model = m;
        r.booster = std::make_unique<booster::Booster>(p);
        r.b = r.booster->boost(m.ptr(), opt);
        return r;
      };
      auto a = boost_one(eager, plugin_eager), b = boost_one(lazy, booster::make_plugin(c));
      auto ha = held(a), hb = held(b);
      ASSERT_EQ(ha.size(), hb.size());
      for (size_t i = 0; i < ha.size(); ++i) EXPECT_TRUE(torch::equal(ha[i], hb[i])) << c.describe() << " " << i;
      EXPECT_EQ(step(a), step(b)) << c.describe();
    }
  });
  // A checkpoint that does not fit is refused before anything is read, listing what differs.
  auto other = tiny();
  other.intermediate_size = 96;
  const std::string bad = dir + "_bad";
  torch::manual_seed(1);
  save_pretrained(tiny(), checkpoint::model_state(*LlamaForCausalLM(other)), bad);
  auto msg = testing::error_message_of([&] { load_pretrained_lazily(bad); });
  EXPECT_NE(msg.find("does not match the model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mlp.up_proj.weight"), std::string::npos) << msg;
}

TEST(LazyInit, AModelThatCannotInitialiseItselfIsNamed) {
  torch::nn::Linear plain(4, 4);
  plain->weight.set_data(nn::deferred_empty({4, 4}));
  EXPECT_TRUE(nn::has_deferred_parameters(*plain));
  auto msg = testing::error_message_of([&] { nn::materialize(*plain, c10::kCPU); });
  EXPECT_NE(msg.find("does not say how to initialise its parameters"), std::string::npos) << msg;
}

}  // namespace lazy_init_test
}  // namespace colossal::llama
