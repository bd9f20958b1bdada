// A checkpoint saved under one layout loads under another: saved by DDP on 2 ranks, training
// continues in one process and on DDP with 4 ranks, with losses within 1e-5 relative of the
// straight run. (ZeRO layouts join when the ZeRO plugins land.)
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

constexpr int kSteps = 6, kSaveAt = 3, kGlobalBatch = 8;

torch::nn::Sequential make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return torch::nn::Sequential(torch::nn::Linear(10, 20), torch::nn::Tanh(), torch::nn::Linear(20, 3));
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
std::vector<double> train(Booster& booster, Boosted& b, torch::nn::Sequential& net, int from, int to) {
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

void continue_and_compare(const std::string& root) {
  auto net = make_net(/*a different init: the checkpoint must supply everything*/ 77);
  auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
  Booster booster(make_plugin("ddp"));
  auto b = booster.boost(net.ptr(), opt);
  auto state = booster.load_checkpoint(b, root);
  EXPECT_EQ(state.step, kSaveAt);
  auto got = train(booster, b, net, kSaveAt, kSteps);
  auto want = straight_losses();
  for (int s = kSaveAt; s < kSteps; ++s) {
    EXPECT_NEAR(got[s - kSaveAt], want[s], 1e-5 * want[s])
        << "step " << s << " on " << dist::world_size() << " rank(s)";
  }
}

TEST(CrossLayout, SavedOnTwoRanksContinuesOnOneAndOnFour) {
  // Three phases, three process groups; the directory travels to the ranks in the environment.
  testing::RankLaunchOptions o;
  if (!testing::is_rank_process()) {
    o.env["COLOSSAL_TEST_CKPT"] = ::testing::TempDir() + "cross_layout_" + std::to_string(::getpid());
  }
  testing::run_ranks(2, [] {
    auto net = make_net(5);
    auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
    Booster booster(make_plugin("ddp"));
    auto b = booster.boost(net.ptr(), opt);
    auto losses = train(booster, b, net, 0, kSaveAt);
    auto want = straight_losses();
    for (int s = 0; s < kSaveAt; ++s) EXPECT_NEAR(losses[s], want[s], 1e-5 * want[s]);
    booster.save_checkpoint(b, std::getenv("COLOSSAL_TEST_CKPT"), {.step = kSaveAt});
  }, o);
  testing::run_ranks(1, [] { continue_and_compare(std::getenv("COLOSSAL_TEST_CKPT")); }, o);
  testing::run_ranks(4, [] { continue_and_compare(std::getenv("COLOSSAL_TEST_CKPT")); }, o);
}

}  // namespace
}  // namespace colossal::booster
