// LoRA on ParallelLinear layers (core/peft/lora.h): the forward and every adapter gradient equal
// the explicit W + (alpha/r) B A in float64; enable_lora freezes everything but the adapters
// (and modules_to_save), so only adapters reach the optimizer; PiSSA leaves the layer's function
// unchanged; merging equals the explicit sum; bad targets and ranks are named.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "core/optim/factory.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "core/peft/lora.h"
#include "tests/support/errors.h"

namespace colossal::peft {
namespace {

// The error `call` throws names `text`.
#define EXPECT_THROW_WITH(call, text) \
  EXPECT_NE(testing::error_message_of([&] { (void)(call); }).find(text), std::string::npos) \
      << testing::error_message_of([&] { (void)(call); })

parallel::ParallelLinear linear(int64_t in, int64_t out, bool bias = true) {
  return parallel::ParallelLinear(parallel::ParallelLinearOptions{.in_features = in, .out_features = out, .bias = bias},
                                  parallel::ParallelContext{});
}

struct TwoLayers : torch::nn::Module {
  TwoLayers() {
    q_proj = register_module("q_proj", linear(12, 10));
    out = register_module("out", linear(10, 6));
    norm = register_parameter("norm", torch::ones({10}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return out->forward(q_proj->forward(x) * norm); }
  parallel::ParallelLinear q_proj{nullptr}, out{nullptr};
  torch::Tensor norm;
};

TEST(Lora, ForwardAndAdapterGradientsEqualTheExplicitSumInFloat64) {
  torch::manual_seed(0);
  auto layer = linear(12, 10);
  layer->add_lora({.rank = 3, .alpha = 6, .init = "gaussian", .seed = 7}, "layer");
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.normal_();  // B starts at zero; a nonzero B makes A's gradient nonzero
  }
  layer->to(torch::kFloat64);
  auto x = torch::randn({4, 5, 12}, torch::kFloat64);
  auto g = torch::randn({4, 5, 10}, torch::kFloat64);
  auto y = layer->forward(x);
  (y * g).sum().backward();

  auto W = layer->weight.detach().clone(), b = layer->bias.detach().clone();
  auto A = layer->lora_A->weight.detach().clone().requires_grad_(true);
  auto B = layer->lora_B->weight.detach().clone().requires_grad_(true);
  auto want = torch::matmul(x, W.t()) + b + 2.0 * torch::matmul(torch::matmul(x, A.t()), B.t());
  (want * g).sum().backward();
  EXPECT_LT((y - want).abs().max().item<double>(), 1e-12);
  EXPECT_LT((layer->lora_A->weight.grad() - A.grad()).abs().max().item<double>(), 1e-12);
  EXPECT_LT((layer->lora_B->weight.grad() - B.grad()).abs().max().item<double>(), 1e-12);
  EXPECT_DOUBLE_EQ(layer->lora_scaling(), 2.0);
}

TEST(Lora, OnlyAdaptersAndModulesToSaveAreTrainedAndReachTheOptimizer) {
  torch::manual_seed(1);
  auto model = std::make_shared<TwoLayers>();
  const auto before = model->q_proj->weight.clone();
  auto layers = enable_lora(*model, {.rank = 2, .targets = {"q_proj"}, .modules_to_save = {"out"}});
  ASSERT_EQ(layers.adapted, std::vector<std::string>{"q_proj"});
  EXPECT_FALSE(model->q_proj->weight.requires_grad());
  EXPECT_FALSE(model->norm.requires_grad());
  EXPECT_TRUE(model->out->weight.requires_grad());  // trained in full
  EXPECT_FALSE(model->out->has_lora());
  auto optimizer = optim::make_optimizer(*model, {.name = "adamw", .lr = 1e-2});
  std::set<const void*> in_optimizer;
  for (const auto& group : optimizer->param_groups())
    for (const auto& p : group.params()) in_optimizer.insert(p.unsafeGetTensorImpl());
  for (const auto& item : model->named_parameters())
    EXPECT_EQ(in_optimizer.count(item.value().unsafeGetTensorImpl()) == 1, item.value().requires_grad()) << item.key();
  for (int step = 0; step < 3; ++step) {
    optimizer->zero_grad();
    model->forward(torch::randn({3, 12})).pow(2).sum().backward();
    optimizer->step();
  }
  EXPECT_TRUE(torch::equal(model->q_proj->weight, before));  // bitwise unchanged
  EXPECT_FALSE(model->q_proj->weight.grad().defined());
  EXPECT_GT(model->q_proj->lora_B->weight.abs().max().item<double>(), 0);  // the adapter learned
}

TEST(Lora, PissaKeepsTheLayersFunctionAndMergingEqualsTheExplicitSum) {
  torch::manual_seed(2);
  auto layer = linear(16, 12);
  auto x = torch::randn({3, 16});
  const auto y0 = layer->forward(x).detach();
  layer->add_lora({.rank = 4, .alpha = 8, .init = "pissa"}, "layer");
  EXPECT_LT((layer->forward(x) - y0).abs().max().item<double>(), 1e-5);
  {
    torch::NoGradGuard no_grad;
    layer->lora_B->weight.add_(0.1 * torch::randn_like(layer->lora_B->weight));
  }
  const auto adapted = layer->forward(x).detach();
  // The whole-state merge and the in-place merge agree, and the merged layer computes the same.
  checkpoint::NamedTensors state;
  for (const auto& item : layer->named_parameters()) state.push_back({"l." + item.key(), item.value().detach().clone()});
  auto merged = merged_state(state, {.rank = 4, .alpha = 8});
  layer->merge_lora();
  EXPECT_FALSE(layer->has_lora());
  EXPECT_LT((layer->forward(x) - adapted).abs().max().item<double>(), 1e-5);
  ASSERT_EQ(merged.size(), 2u);  // weight and bias; the adapter left out
  for (const auto& [name, t] : merged)
    if (name == "l.weight") EXPECT_LT((t - layer->weight).abs().max().item<double>(), 1e-6);
}

TEST(Lora, BadTargetsAndRanksAreNamed) {
  auto model = std::make_shared<TwoLayers>();
  EXPECT_THROW_WITH(enable_lora(*model, {.rank = 2, .targets = {"k_proj"}}),
                    "target 'k_proj' matches no linear layer; the model's are: q_proj, out");
  EXPECT_THROW_WITH(enable_lora(*model, {.rank = 11, .targets = {"q_proj"}}),
                    "q_proj: rank 11 must be between 1 and the layer's smaller side (12 -> 10)");
  EXPECT_THROW_WITH(enable_lora(*model, {.rank = 0}), "enable_lora with rank 0");
  EXPECT_THROW_WITH(enable_lora(*model, {.rank = 2, .modules_to_save = {"lm_head"}}),
                    "modules_to_save 'lm_head' names no module with parameters");
  auto fresh = std::make_shared<TwoLayers>();
  enable_lora(*fresh, {.rank = 2, .targets = {"all-linear"}}, {"out"});
  EXPECT_TRUE(fresh->q_proj->has_lora());
  EXPECT_FALSE(fresh->out->has_lora());  // excluded from all-linear
  EXPECT_THROW_WITH(enable_lora(*fresh, {.rank = 2, .targets = {"q_proj"}}), "already has an adapter");
}

TEST(Lora, CommaSeparatedFlagValuesSplit) {
  EXPECT_EQ(split_names({"q_proj,v_proj", "o_proj"}), (std::vector<std::string>{"q_proj", "v_proj", "o_proj"}));
}

}  // namespace
}  // namespace colossal::peft
