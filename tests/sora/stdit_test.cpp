// STDiT and the caption encoder: shapes, the zero-velocity start, conditioning that reaches the
// output, activation checkpointing that changes no gradient, and padding the encoder ignores.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sora/models/stdit.h"
#include "sora/models/text_encoder.h"
#include "tests/support/errors.h"

namespace sora_stdit_test {
using namespace colossal::sora;

StditOptions small() {
  return {.in_channels = 4, .hidden = 32, .depth = 2, .heads = 4, .text_dim = 16, .text_tokens = 12};
}

TEST(Stdit, ShapesAndTheZeroVelocityStart) {
  torch::manual_seed(0);
  Stdit model(small());
  TextEncoder text(TextEncoderOptions{.dim = 16, .layers = 1, .heads = 2, .max_tokens = 12});
  const auto x = torch::randn({2, 4, 3, 8, 6});
  const auto caption = text->forward({"a cockatoo", "people walk"});
  EXPECT_EQ(caption.tokens.sizes(), (std::vector<int64_t>{2, 12, 16}));
  const auto v = model->forward(x, torch::tensor({0.3, 0.9}), caption.tokens, caption.mask);
  EXPECT_EQ(v.sizes(), x.sizes());
  EXPECT_EQ(v.abs().max().item<double>(), 0);  // the final layer starts at zero
  const auto [null_tokens, null_mask] = model->null_text(2);
  EXPECT_EQ(null_tokens.sizes(), caption.tokens.sizes());
  auto msg = colossal::testing::error_message_of(
      [&] { model->forward(torch::randn({2, 4, 3, 7, 6}), torch::tensor({0.3, 0.9}), caption.tokens, caption.mask); });
  EXPECT_NE(msg.find("latents of [2, 4, 3, 7, 6] do not divide into patches"), std::string::npos) << msg;
}

TEST(Stdit, TimestepCaptionAndEveryParameterMatter) {
  torch::manual_seed(1);
  Stdit model(small());
  TextEncoder text(TextEncoderOptions{.dim = 16, .layers = 1, .heads = 2, .max_tokens = 12});
  for (auto& p : model->named_parameters())
    if (p.key().find("final_linear") != std::string::npos) {
      torch::NoGradGuard no_grad;
      p.value().normal_(0, 0.1);
    }
  const auto x = torch::randn({2, 4, 2, 4, 4});
  const auto a = text->forward({"a cockatoo", "a cockatoo"}), b = text->forward({"people walk", "a cockatoo"});
  const auto t = torch::tensor({0.5, 0.5});
  const auto va = model->forward(x, t, a.tokens, a.mask), vb = model->forward(x, t, b.tokens, b.mask);
  EXPECT_FALSE(torch::allclose(va[0], vb[0]));  // sample 0's caption differs
  EXPECT_TRUE(torch::allclose(va[1], vb[1], 1e-5, 1e-6));  // sample 1's does not
  EXPECT_FALSE(torch::allclose(va, model->forward(x, torch::tensor({0.1, 0.5}), a.tokens, a.mask)));
  (va.pow(2).sum() + vb.pow(2).sum()).backward();
  for (const auto& p : model->named_parameters()) {
    if (p.key() == "null_text") continue;  // used only for dropped captions
    ASSERT_TRUE(p.value().grad().defined()) << p.key();
    EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0) << p.key();
  }
}

TEST(Stdit, ActivationCheckpointingChangesNoGradient) {
  auto grads = [](bool checkpointing) {
    torch::manual_seed(2);
    auto o = small();
    o.activation_checkpointing = checkpointing;
    Stdit model(o);
    for (auto& p : model->named_parameters())
      if (p.key().find("final_linear") != std::string::npos) {
        torch::NoGradGuard no_grad;
        p.value().normal_(0, 0.1);
      }
    const auto x = torch::randn({1, 4, 2, 4, 4});
    const auto [tokens, mask] = model->null_text(1);
    model->forward(x, torch::tensor({0.4}), tokens, mask).pow(2).sum().backward();
    std::vector<torch::Tensor> out;
    for (const auto& p : model->parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const auto plain = grads(false), checkpointed = grads(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(torch::allclose(plain[i], checkpointed[i], 1e-6, 1e-7)) << i;
}

TEST(TextEncoderTest, PaddingIsIgnored) {
  torch::manual_seed(3);
  TextEncoder short_enc(TextEncoderOptions{.dim = 16, .layers = 2, .heads = 2, .max_tokens = 16});
  TextEncoder long_enc(TextEncoderOptions{.dim = 16, .layers = 2, .heads = 2, .max_tokens = 32});
  torch::NoGradGuard no_grad;
  // The same weights for the first 16 positions: the real tokens see the same keys.
  auto sp = short_enc->named_parameters(), lp = long_enc->named_parameters();
  for (auto& p : sp) {
    auto& q = lp[p.key()];
    if (p.key() == "position.weight") q.narrow(0, 0, 16).copy_(p.value());
    else q.copy_(p.value());
  }
  const auto a = short_enc->forward({"a cockatoo"}), b = long_enc->forward({"a cockatoo"});
  const int64_t real = a.mask.sum().item<int64_t>();
  EXPECT_EQ(real, 12);  // BOS, 10 bytes, EOS; the rest is padding (16 or 32 positions in all)
  EXPECT_EQ(b.mask.sum().item<int64_t>(), 12);
  EXPECT_TRUE(torch::allclose(a.tokens.narrow(1, 0, real), b.tokens.narrow(1, 0, real), 1e-5, 1e-6));
}

}  // namespace sora_stdit_test
