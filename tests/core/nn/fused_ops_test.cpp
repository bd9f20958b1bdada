// Fused operations against the compositions they replace: values and every gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/nn/activation_checkpoint.h"
#include "core/nn/fused_losses.h"
#include "core/nn/rms_norm.h"
#include "kernels/cpu/cross_entropy.h"
#include "tests/support/errors.h"

namespace colossal::nn {
namespace {

void expect_close(const torch::Tensor& a, const torch::Tensor& b, double rtol, double atol, const char* what) {
  EXPECT_TRUE(torch::allclose(a.to(torch::kDouble), b.to(torch::kDouble), rtol, atol))
      << what << ": max abs diff " << (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

TEST(FusedCrossEntropy, MatchesLogSoftmaxNll) {
  torch::manual_seed(1);
  // 37 rows (not a multiple of the row block), a large vocabulary, some ignored targets.
  for (int64_t vocab : {11, 32000}) {
    auto logits = (torch::randn({37, vocab}) * 4).requires_grad_(true);
    auto target = torch::randint(vocab, {37}, torch::kLong);
    target.index_put_({torch::tensor({0, 5, 36})}, -100);
    // The reference in float64: two fp32 computations (ATen's and ours) differ by a few units in
    // the last place of the logits (|x| up to ~16 here, so ~2e-6 in x - lse), which moves the
    // softmax relatively by as much; against the exact value ours stays within that.
    auto ref_logits = logits.detach().to(torch::kDouble).requires_grad_(true);
    auto ref = torch::nn::functional::cross_entropy(ref_logits, target,
                                                    torch::nn::functional::CrossEntropyFuncOptions().ignore_index(-100));
    auto ours = cross_entropy(logits, target);
    expect_close(ours, ref, 1e-6, 1e-6, "loss");
    (ours * 3).backward();
    (ref * 3).backward();
    const double ulps = 8 * 1.19e-7 * logits.detach().abs().max().item<double>();  // in x - lse
    const double scale = 3.0 / 34;                                                 // d(3 mean)/d row
    expect_close(logits.grad(), ref_logits.grad(), 1e-5, ulps * scale, "gradient");
  }
}

TEST(FusedCrossEntropy, Bf16LogitsComputeInFp32) {
  torch::manual_seed(2);
  auto logits = torch::randn({9, 300}).to(torch::kBFloat16).requires_grad_(true);
  auto target = torch::randint(300, {9}, torch::kLong);
  auto ref_logits = logits.detach().clone().requires_grad_(true);
  auto ref = torch::nn::functional::cross_entropy(ref_logits.to(torch::kFloat), target);
  auto ours = cross_entropy(logits, target);
  EXPECT_EQ(ours.scalar_type(), torch::kFloat);
  expect_close(ours, ref, 1e-6, 1e-6, "loss");
  ours.backward();
  ref.backward();
  EXPECT_EQ(logits.grad().scalar_type(), torch::kBFloat16);
  expect_close(logits.grad(), ref_logits.grad(), 1e-2, 1e-4, "gradient");
}

TEST(FusedCrossEntropy, BadTargetIsNamed) {
  auto msg = testing::error_message_of([] { cross_entropy(torch::zeros({2, 5}), torch::tensor({1, 7}, torch::kLong)); });
  EXPECT_NE(msg.find("a target is outside [0, 5)"), std::string::npos) << msg;
}

// The head and the loss fused, every kernel this CPU runs, against float64 linear + cross entropy:
// loss, both gradients, a scaled loss (d loss = 3), ignored rows, vocabularies that are and are
// not a multiple of the vector width.
TEST(LinearCrossEntropy, MatchesLinearThenCrossEntropyInFloat64) {
  namespace kc = colossal::kernels::cpu;
  std::vector<std::string> kernels{"scalar"};
  if (__builtin_cpu_supports("avx512f")) kernels.push_back("avx512");
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) kernels.push_back("avx2");
  for (const auto& kernel : kernels) {
    auto previous = kc::cross_entropy_use(kernel);
    for (int64_t vocab : {13, 64, 5003}) {
      torch::manual_seed(vocab);
      auto hidden = torch::randn({29, 24}).requires_grad_(true);
      auto weight = (torch::randn({vocab, 24}) * 0.5).requires_grad_(true);
      auto target = torch::randint(vocab, {29}, torch::kLong);
      target.index_put_({torch::tensor({0, 7, 28})}, -100);
      auto ref_h = hidden.detach().to(torch::kDouble).requires_grad_(true);
      auto ref_w = weight.detach().to(torch::kDouble).requires_grad_(true);
      auto ref = torch::nn::functional::cross_entropy(torch::mm(ref_h, ref_w.t()), target);
      auto ours = linear_cross_entropy(hidden, weight, target);
      SCOPED_TRACE(kernel + ", vocab " + std::to_string(vocab));
      expect_close(ours, ref, 1e-5, 1e-6, "loss");
      (ours * 3).backward();
      (ref * 3).backward();
      expect_close(hidden.grad(), ref_h.grad(), 1e-4, 1e-6, "hidden gradient");
      expect_close(weight.grad(), ref_w.grad(), 1e-4, 1e-6, "weight gradient");
    }
    kc::cross_entropy_use(previous);
  }
  EXPECT_THROW(kc::cross_entropy_use("avx1024"), std::invalid_argument);
}

TEST(LinearCrossEntropy, Bf16AndNoGradAndErrors) {
  torch::manual_seed(4);
  auto hidden = torch::randn({9, 16});
  auto weight = torch::randn({300, 16});
  auto target = torch::randint(300, {9}, torch::kLong);
  auto ref = cross_entropy(torch::mm(hidden, weight.t()), target);
  {  // evaluation: the same loss, nothing kept for a backward
    torch::NoGradGuard no_grad;
    expect_close(linear_cross_entropy(hidden, weight, target), ref, 1e-6, 1e-6, "loss without gradient");
  }
  auto h16 = hidden.to(torch::kBFloat16).requires_grad_(true);
  auto w16 = weight.to(torch::kBFloat16).requires_grad_(true);
  auto ref16 = cross_entropy(torch::mm(h16, w16.t()), target);
  auto ours16 = linear_cross_entropy(h16, w16, target);
  EXPECT_EQ(ours16.scalar_type(), torch::kFloat);
  expect_close(ours16, ref16, 1e-5, 1e-5, "bf16 loss");
  ours16.backward();
  EXPECT_EQ(h16.grad().scalar_type(), torch::kBFloat16);
  auto g_h = h16.grad().clone(), g_w = w16.grad().clone();
  h16.mutable_grad() = torch::Tensor(), w16.mutable_grad() = torch::Tensor();
  ref16.backward();
  expect_close(g_h, h16.grad(), 2e-2, 1e-3, "bf16 hidden gradient");
  expect_close(g_w, w16.grad(), 2e-2, 1e-3, "bf16 weight gradient");
  // Every target ignored: nan, as the mean over nothing; the gradients are zero.
  auto h = hidden.clone().requires_grad_(true);
  auto none = linear_cross_entropy(h, weight, torch::full({9}, -100, torch::kLong));
  EXPECT_TRUE(std::isnan(none.item<float>()));
  auto msg = testing::error_message_of([&] { linear_cross_entropy(hidden, weight, torch::full({9}, 300, torch::kLong)); });
  EXPECT_NE(msg.find("a target is outside [0, 300)"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { linear_cross_entropy(hidden, weight.t(), target); });
  EXPECT_NE(msg.find("expected hidden [N, D] and weight [V, D]"), std::string::npos) << msg;
}

TEST(LinearTokenLogProbs, MatchesLogSoftmaxGatherWithRowGradients) {
  torch::manual_seed(5);
  for (int64_t vocab : {13, 4000}) {
    auto hidden = torch::randn({11, 24}).requires_grad_(true);
    auto weight = (torch::randn({vocab, 24}) * 0.5).requires_grad_(true);
    auto target = torch::randint(vocab, {11}, torch::kLong);
    target.index_put_({torch::tensor({2, 7})}, -100);
    auto ref_h = hidden.detach().to(torch::kDouble).requires_grad_(true);
    auto ref_w = weight.detach().to(torch::kDouble).requires_grad_(true);
    auto valid = target.ne(-100);
    auto safe = torch::where(valid, target, torch::zeros_like(target));
    auto ref = torch::log_softmax(torch::mm(ref_h, ref_w.t()), 1).gather(1, safe.unsqueeze(1)).squeeze(1) *
               valid.to(torch::kDouble);
    auto ours = linear_token_log_probs(hidden, weight, target);
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    EXPECT_EQ(ours.scalar_type(), torch::kFloat);
    expect_close(ours, ref, 1e-5, 1e-5, "log-probabilities");
    EXPECT_EQ(ours[2].item<float>(), 0.0f);
    // A different weight per row (as a sequence sum times a per-pair coefficient gives).
    auto g = torch::randn({11});
    ours.backward(g);
    ref.backward(g.to(torch::kDouble));
    expect_close(hidden.grad(), ref_h.grad(), 1e-4, 1e-5, "hidden gradient");
    expect_close(weight.grad(), ref_w.grad(), 1e-4, 1e-5, "weight gradient");
    // The unfused composition from logits agrees.
    torch::NoGradGuard no_grad;
    expect_close(token_log_probs(torch::mm(hidden, weight.t()), target), ref, 1e-5, 1e-5, "from logits");
    expect_close(linear_token_log_probs(hidden, weight, target), ref, 1e-5, 1e-5, "without gradient");
  }
  // bf16: the value in fp32 from bf16 logits, gradients in bf16.
  auto h16 = torch::randn({6, 16}).to(torch::kBFloat16).requires_grad_(true);
  auto w16 = torch::randn({300, 16}).to(torch::kBFloat16).requires_grad_(true);
  auto target = torch::randint(300, {6}, torch::kLong);
  auto ours16 = linear_token_log_probs(h16, w16, target);
  auto ref16 = token_log_probs(torch::mm(h16.detach(), w16.detach().t()), target);
  expect_close(ours16, ref16, 1e-3, 1e-3, "bf16 log-probabilities");
  ours16.sum().backward();
  EXPECT_EQ(h16.grad().scalar_type(), torch::kBFloat16);
  auto msg = testing::error_message_of([&] { linear_token_log_probs(h16, w16.to(torch::kFloat), target); });
  EXPECT_NE(msg.find("must both be fp32 or both bf16"), std::string::npos) << msg;
}

TEST(FusedRmsNorm, MatchesComposition) {
  torch::manual_seed(3);
  for (int64_t dim : {768, 37}) {  // vector-width multiple and a ragged tail
    auto x = torch::randn({3, 41, dim}).requires_grad_(true);
    auto w = (torch::rand({dim}) + 0.5).requires_grad_(true);
    auto rx = x.detach().clone().requires_grad_(true);
    auto rw = w.detach().clone().requires_grad_(true);
    auto ref = rw * (rx * torch::rsqrt(rx.pow(2).mean(-1, true) + 1e-6));
    auto ours = rms_norm(x, w, 1e-6);
    expect_close(ours, ref, 1e-5, 1e-6, "output");
    auto gy = torch::randn_like(ref);
    ref.backward(gy);
    ours.backward(gy);
    expect_close(x.grad(), rx.grad(), 1e-4, 1e-5, "input gradient");
    expect_close(w.grad(), rw.grad(), 1e-4, 1e-4, "weight gradient");
  }
}

TEST(ActivationCheckpoint, TrainsParametersBehindAnInputWithNoGradient) {
  // LoRA with a frozen embedding: the block's input carries no gradient, its adapter does.
  torch::manual_seed(6);
  auto frozen = torch::nn::Linear(8, 8);
  for (auto& p : frozen->parameters()) p.requires_grad_(false);
  auto adapter = torch::nn::Linear(8, 8);
  auto block = [&](const torch::Tensor& h) { return frozen(h) + adapter(torch::tanh(h)); };
  auto x = torch::randn({4, 8});  // no gradient
  block(x).pow(2).sum().backward();
  auto plain = adapter->weight.grad().clone();
  adapter->weight.mutable_grad() = torch::Tensor();
  auto y = checkpoint(Block(block), x);
  ASSERT_TRUE(y.requires_grad());
  y.pow(2).sum().backward();
  ASSERT_TRUE(adapter->weight.grad().defined());
  EXPECT_TRUE(torch::allclose(adapter->weight.grad(), plain, 1e-6, 1e-7));
  adapter->weight.mutable_grad() = torch::Tensor();
  auto z = checkpoint(MultiBlock([&](const std::vector<torch::Tensor>& in) { return block(in[0] + in[1]); }),
                      {x * 0.5, x * 0.5});
  z.pow(2).sum().backward();
  EXPECT_TRUE(torch::allclose(adapter->weight.grad(), plain, 1e-5, 1e-6));
}

TEST(ActivationCheckpoint, SameGradientsAsPlainBackward) {
  torch::manual_seed(4);
  auto l1 = torch::nn::Linear(8, 16), l2 = torch::nn::Linear(16, 8);
  auto block = [&](const torch::Tensor& h) { return l2(torch::gelu(l1(h))) + h; };
  auto x = torch::randn({5, 8}, torch::requires_grad());
  auto run = [&](bool checkpointed) {
    for (auto& p : l1->parameters()) p.mutable_grad() = torch::Tensor();
    for (auto& p : l2->parameters()) p.mutable_grad() = torch::Tensor();
    x.mutable_grad() = torch::Tensor();
    auto h = checkpointed ? checkpoint(block, x) : block(x);
    h = checkpointed ? checkpoint(block, h) : block(h);
    h.pow(2).sum().backward();
    std::vector<torch::Tensor> g{x.grad().clone()};
    for (auto& p : l1->parameters()) g.push_back(p.grad().clone());
    for (auto& p : l2->parameters()) g.push_back(p.grad().clone());
    return g;
  };
  auto plain = run(false), ckpt = run(true);
  ASSERT_EQ(plain.size(), ckpt.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::equal(plain[i], ckpt[i])) << "gradient " << i;
}

// Several inputs, one of them computed from parameters outside the block (conditioning): every
// gradient equals the plain backward's, and the outside graph is walked once.
TEST(ActivationCheckpoint, SeveralInputsWithTheirOwnHistory) {
  auto run = [](bool checkpointed) {
    torch::manual_seed(4);
    auto w = torch::randn({6, 6}).requires_grad_(true);
    auto outside = torch::randn({6}).requires_grad_(true);
    auto x = torch::randn({3, 6}).requires_grad_(true);
    const auto condition = torch::tanh(outside) * 2;  // has a history
    MultiBlock block = [w](const std::vector<torch::Tensor>& in) { return torch::tanh(in[0].matmul(w) + in[1]); };
    auto y = checkpointed ? checkpoint(block, {x, condition}) : block({x, condition});
    y = checkpointed ? checkpoint(block, {y, condition}) : block({y, condition});  // the condition twice
    y.pow(2).sum().backward();
    return std::vector<torch::Tensor>{w.grad(), outside.grad(), x.grad()};
  };
  const auto plain = run(false), checkpointed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::allclose(plain[i], checkpointed[i], 1e-6, 1e-7)) << i;
}

}  // namespace
}  // namespace colossal::nn
