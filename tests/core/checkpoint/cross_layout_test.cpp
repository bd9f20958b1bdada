// A checkpoint saved under one layout (plugin and world size) loads under any other: training
// continues with losses within 1e-5 relative of the straight single-process run.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/module_hooks.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

constexpr int kSteps = 6, kSaveAt = 3, kGlobalBatch = 8;

// Modules run through colossal::nn::call, so ZeRO-3 can gather them.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(10, 20));
    fc2 = register_module("fc2", torch::nn::Linear(20, 3));
  }
  torch::Tensor forward(const torch::Tensor& x) { return nn::call(fc2, torch::tanh(nn::call(fc1, x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(TinyNet);

TinyNet make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return TinyNet();
}

std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(1000 + step);
  return {at::randn({kGlobalBatch, 10}, g), at::randn({kGlobalBatch, 3}, g)};
}

// The reference: one process, plain LibTorch, all steps.
std::vector<double> straight_losses() {
  auto net = make_net(5);
  torch::optim::AdamW opt(net->parameters(), torch::optim::AdamWOptions(1e-2));
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    opt.zero_grad();
    auto loss = torch::mse_loss(net->forward(x), y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<double>());
  }
  return losses;
}

// Steps [from, to) under DDP on however many ranks this process group has.
std::vector<double> train(Booster& booster, Boosted& b, TinyNet& net, int from, int to) {
  int n = dist::world_size(), r = dist::rank(), local = kGlobalBatch / n;
  std::vector<double> losses;
  for (int s = from; s < to; ++s) {
    auto [x, y] = batch(s);
    b.optimizer->zero_grad();
    auto loss = torch::mse_loss(net->forward(x.narrow(0, r * local, local)), y.narrow(0, r * local, local));
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    auto l = loss.detach().to(torch::kFloat64).reshape({1});
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
    losses.push_back(l.item<double>());
  }
  return losses;
}

// separate: save_model + save_optimizer instead of one save_checkpoint.
void continue_and_compare(const std::string& root, const std::string& plugin, bool separate) {
  auto net = make_net(/*a different init: the checkpoint must supply everything*/ 77);
  auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
  Booster booster(make_plugin(plugin));
  auto b = booster.boost(net.ptr(), opt);
  if (separate) {
    auto report = booster.load_model(*b.optimizer, *net, root + "/model");
    EXPECT_TRUE(report.clean()) << report.describe();
    booster.load_optimizer(*b.optimizer, *net, root);
  } else {
    EXPECT_EQ(booster.load_checkpoint(b, root).step, kSaveAt);
  }
  auto got = train(booster, b, net, kSaveAt, kSteps);
  auto want = straight_losses();
  for (int s = kSaveAt; s < kSteps; ++s) {
    EXPECT_NEAR(got[s - kSaveAt], want[s], 1e-5 * want[s])
        << "step " << s << " under " << plugin << " on " << dist::world_size() << " rank(s)";
  }
}

// Saves at step kSaveAt under `plugin` on `ranks` ranks (the first kSaveAt steps must match the
// straight run too), then runs each of `continuations` from the checkpoint.
void save_then_continue(const std::string& plugin, int ranks,
                        const std::vector<std::pair<std::string, int>>& continuations,
                        bool separate = false) {
  // One process group per phase; the directory travels to the ranks in the environment.
  testing::RankLaunchOptions o;
  if (!testing::is_rank_process()) {
    o.env["COLOSSAL_TEST_CKPT"] = ::testing::TempDir() + "cross_layout_" + plugin + "_" +
                                  std::to_string(::getpid());
  }
  testing::run_ranks(ranks, [plugin, separate] {
    auto net = make_net(5);
    auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
    Booster booster(make_plugin(plugin));
    auto b = booster.boost(net.ptr(), opt);
    auto losses = train(booster, b, net, 0, kSaveAt);
    auto want = straight_losses();
    for (int s = 0; s < kSaveAt; ++s) EXPECT_NEAR(losses[s], want[s], 1e-5 * want[s]);
    std::string root = std::getenv("COLOSSAL_TEST_CKPT");
    if (separate) {
      booster.save_model(*b.optimizer, *net, root + "/model");
      booster.save_optimizer(*b.optimizer, *net, root);
    } else {
      booster.save_checkpoint(b, root, {.step = kSaveAt});
    }
  }, o);
  for (const auto& [next, n] : continuations) {
    std::string name = next;
    testing::run_ranks(n, [name, separate] {
      continue_and_compare(std::getenv("COLOSSAL_TEST_CKPT"), name, separate);
    }, o);
  }
}

TEST(CrossLayout, DdpOnTwoContinuesOnOneDdpOnFourAndZero2OnFour) {
  save_then_continue("ddp", 2, {{"ddp", 1}, {"ddp", 4}, {"zero2", 4}});
}

TEST(CrossLayout, Zero3OnFourContinuesOnDdpTwoZero2TwoAndZero3Two) {
  save_then_continue("zero3", 4, {{"ddp", 2}, {"zero2", 2}, {"zero3", 2}});
}

TEST(CrossLayout, SaveModelAndOptimizerSeparatelyAcrossLayouts) {
  save_then_continue("zero3", 2, {{"zero1", 4}, {"ddp", 1}}, /*separate=*/true);
}

TEST(CrossLayout, Zero2OnFourContinuesOnDdpTwoZero1TwoAndOneProcess) {
  // Sliced optimizer state (one file per rank) reassembled for other slicings and for none.
  save_then_continue("zero2", 4, {{"ddp", 2}, {"zero1", 2}, {"zero2", 1}});
}

}  // namespace
}  // namespace colossal::booster
