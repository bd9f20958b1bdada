// Split backward's weight-gradient store: under DeferWeightGradients a backward computes the
// input's gradient and leaves every weight's (linear layers and checkpointed blocks) to the
// store; computing the store's entries gives the plain backward's gradients.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "core/nn/activation_checkpoint.h"
#include "core/nn/rms_norm.h"
#include "core/nn/weight_gradient_store.h"

namespace colossal::nn {
namespace {

struct Net {
  torch::Tensor w1 = torch::randn({16, 8}).requires_grad_(), b1 = torch::randn({16}).requires_grad_(),
                w2 = torch::randn({8, 16}).requires_grad_(), norm = torch::rand({8}).requires_grad_();
  std::vector<torch::Tensor> params() const { return {w1, b1, w2, norm}; }
  torch::Tensor block(const torch::Tensor& x) const {
    return nn::linear(torch::gelu(nn::linear(rms_norm(x, norm, 1e-6), w1, b1)), w2) + x;
  }
};

// Gradients of (x, every parameter) for a loss over two blocks, by plain autograd.
std::vector<torch::Tensor> plain_gradients(const Net& net, const torch::Tensor& x) {
  auto in = x.detach().requires_grad_();
  auto h = net.block(net.block(in));
  std::vector<torch::Tensor> wrt{in};
  for (const auto& p : net.params()) wrt.push_back(p);
  return torch::autograd::grad({h.pow(2).sum()}, wrt);
}

void expect_split_backward_matches(bool checkpointed) {
  torch::manual_seed(8);
  Net net;
  auto x = torch::randn({3, 5, 8});
  const auto want = plain_gradients(net, x);

  WeightGradientStore store;
  auto in = x.detach().requires_grad_();
  torch::Tensor loss;
  {
    DeferWeightGradients defer(&store);
    auto h = in;
    for (int i = 0; i < 2; ++i) {
      auto f = [&](const torch::Tensor& t) { return net.block(t); };
      h = checkpointed ? checkpoint(f, h) : f(h);
    }
    loss = h.pow(2).sum();
  }
  // B: the input's gradient only; no parameter is touched.
  auto dx = torch::autograd::grad({loss}, {in})[0];
  EXPECT_TRUE(torch::allclose(dx, want[0], 1e-5, 1e-6));
  for (const auto& p : net.params()) EXPECT_FALSE(p.grad().defined());
  // W: the store's entries, summed per parameter.
  std::map<const c10::TensorImpl*, torch::Tensor> got;
  auto entries = store.take();
  EXPECT_TRUE(store.take().empty());
  for (auto& e : entries) {
    auto& g = got[e.param.unsafeGetTensorImpl()];
    g = g.defined() ? g + e.gradient() : e.gradient();
  }
  const auto params = net.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const bool deferred = got.count(params[i].unsafeGetTensorImpl()) > 0;
    // The norm's gradient is not the linears' business: it comes with B unless checkpointed.
    if (i == 3 && !checkpointed) {
      EXPECT_FALSE(deferred);
      continue;
    }
    ASSERT_TRUE(deferred) << "parameter " << i << " has no deferred gradient";
    EXPECT_TRUE(torch::allclose(got[params[i].unsafeGetTensorImpl()], want[i + 1], 1e-5, 1e-6)) << "parameter " << i;
  }
}

TEST(WeightGradientStore, LinearLayersLeaveTheirWeightGradientsForLater) { expect_split_backward_matches(false); }

TEST(WeightGradientStore, CheckpointedBlocksLeaveEveryParameterGradientForLater) {
  expect_split_backward_matches(true);
}

TEST(WeightGradientStore, WithoutTheScopeLinearIsThePlainOp) {
  torch::manual_seed(2);
  auto x = torch::randn({4, 6}, torch::requires_grad());
  auto w = torch::randn({3, 6}, torch::requires_grad()), b = torch::randn({3}, torch::requires_grad());
  auto y = nn::linear(x, w, b);
  EXPECT_TRUE(torch::equal(y, torch::nn::functional::linear(x, w, b)));
  y.sum().backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(b.grad().defined());
  // Inputs that need no gradient (a stage's first layer fed by data) keep the plain op too.
  WeightGradientStore store;
  DeferWeightGradients defer(&store);
  w.mutable_grad() = torch::Tensor();
  nn::linear(x.detach(), w).sum().backward();
  EXPECT_TRUE(w.grad().defined());
  EXPECT_TRUE(store.take().empty());
}

TEST(WeightGradientStore, GraphLeavesAreTheParametersBackwardWouldReach) {
  auto a = torch::randn({2}, torch::requires_grad()), b = torch::randn({2}, torch::requires_grad());
  auto c = torch::randn({2});
  auto y = (a * 2 + b * a + c).sum();
  auto leaves = graph_leaves(y);
  ASSERT_EQ(leaves.size(), 2u);
  EXPECT_TRUE((leaves[0].is_same(a) && leaves[1].is_same(b)) || (leaves[0].is_same(b) && leaves[1].is_same(a)));
}

}  // namespace
}  // namespace colossal::nn
