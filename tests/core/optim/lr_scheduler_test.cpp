#include "core/optim/lr_scheduler.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "core/optim/factory.h"
#include "core/optim/fused_adamw.h"
#include "core/optim/param_groups.h"
#include "tests/support/errors.h"

namespace colossal::optim {
namespace {

TEST(LRScheduler, WarmupThenCosine) {
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::AdamW opt({p}, torch::optim::AdamWOptions(1.0));
  LRScheduler s(opt, {.kind = "cosine", .warmup_steps = 4, .total_steps = 14, .min_lr_ratio = 0.1});
  EXPECT_DOUBLE_EQ(s.lr(), 0.25);  // step 0 of warm-up
  std::vector<double> lrs;
  for (int i = 0; i < 14; ++i) {
    s.step();
    lrs.push_back(s.lr());
  }
  EXPECT_DOUBLE_EQ(lrs[0], 0.5);
  EXPECT_DOUBLE_EQ(lrs[2], 1.0);  // step 3: warm-up done
  EXPECT_NEAR(lrs[3], 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.0)), 1e-12);  // step 4: peak
  EXPECT_NEAR(lrs[8], 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * 0.5)), 1e-12);  // halfway
  EXPECT_NEAR(lrs[13], 0.1, 1e-12);  // floor, and it stays there
}

TEST(LRScheduler, LinearDecayEachGroupFromItsOwnRate) {
  auto a = torch::zeros({1}, torch::requires_grad());
  auto b = torch::zeros({1}, torch::requires_grad());
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{a}, std::make_unique<torch::optim::SGDOptions>(1.0));
  groups.emplace_back(std::vector<torch::Tensor>{b}, std::make_unique<torch::optim::SGDOptions>(0.5));
  torch::optim::SGD opt(std::move(groups), torch::optim::SGDOptions(1.0));
  LRScheduler s(opt, {.kind = "linear", .warmup_steps = 0, .total_steps = 10});
  s.set_step(5);
  EXPECT_DOUBLE_EQ(s.lr(0), 0.5);
  EXPECT_DOUBLE_EQ(s.lr(1), 0.25);
}

TEST(LRScheduler, BadOptionsAreExplained) {
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD opt({p}, torch::optim::SGDOptions(1.0));
  auto msg = testing::error_message_of(
      [&] { LRScheduler(opt, {.kind = "cosine", .warmup_steps = 10, .total_steps = 10}); });
  EXPECT_NE(msg.find("cosine decay needs total_steps (10) > warmup_steps (10)"), std::string::npos)
      << msg;
  EXPECT_NE(testing::error_message_of([&] { LRScheduler(opt, {.kind = "step"}); })
                .find("expected constant, cosine or linear, got 'step'"),
            std::string::npos);
}

TEST(ParamGroups, NormsAndBiasesDoNotDecay) {
  torch::nn::Sequential model(torch::nn::Linear(4, 8), torch::nn::LayerNorm(torch::nn::LayerNormOptions({8})),
                              torch::nn::Linear(8, 2));
  auto split = split_weight_decay(*model);
  EXPECT_EQ(split.decay.size(), 2u);  // the two Linear weights
  EXPECT_EQ(split.no_decay_names,
            (std::vector<std::string>{"0.bias", "1.weight", "1.bias", "2.bias"}));
  torch::optim::AdamW opt(weight_decay_groups(*model, torch::optim::AdamWOptions(1e-3).weight_decay(0.1)));
  ASSERT_EQ(opt.param_groups().size(), 2u);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::AdamWOptions&>(opt.param_groups()[0].options()).weight_decay(), 0.1);
  EXPECT_DOUBLE_EQ(static_cast<torch::optim::AdamWOptions&>(opt.param_groups()[1].options()).weight_decay(), 0.0);
}

TEST(OptimizerFactory, EveryNameBuildsAndTrains) {
  for (const std::string name : {"adamw", "fused_adamw", "adam", "sgd"}) {
    torch::manual_seed(0);
    torch::nn::Linear model(4, 1);
    OptimizerOptions o;
    o.name = name;
    o.lr = 0.05;
    o.weight_decay = 0.01;
    o.momentum = name == "sgd" ? 0.9 : 0.0;
    o.nesterov = name == "sgd";
    auto opt = make_optimizer(*model, o);
    ASSERT_EQ(opt->param_groups().size(), 2u) << name << ": decay and no-decay groups";
    auto x = torch::randn({16, 4});
    auto y = x.sum(1, true);
    double first = 0, last = 0;
    for (int i = 0; i < 30; ++i) {
      opt->zero_grad();
      auto loss = torch::mse_loss(model(x), y);
      loss.backward();
      opt->step();
      (i == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, first * 0.5) << name << " must reduce a simple regression loss";
  }
  EXPECT_NE(testing::error_message_of([] {
              OptimizerOptions o;
              o.name = "lamb";
              o.validate();
            }).find("expected adamw, fused_adamw, adam or sgd, got 'lamb'"),
            std::string::npos);
}

}  // namespace
}  // namespace colossal::optim
