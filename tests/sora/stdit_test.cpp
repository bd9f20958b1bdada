// STDiT and the caption encoder: shapes, the zero-velocity start, conditioning that reaches the
// output, activation checkpointing that changes no gradient, padding the encoder ignores, and
// sequence parallelism (2 real ranks) that equals one process in the velocity and every gradient.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <map>

#include "core/dist/collectives.h"
#include "core/dist/parallel_dims.h"
#include "sora/models/stdit.h"
#include "sora/models/text_encoder.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

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
    if (p.key() == "null_text.tokens") continue;  // used only for dropped captions
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

namespace sora_stdit_sp_test {
using namespace colossal::sora;
namespace dist = colossal::dist;
namespace parallel = colossal::parallel;

colossal::parallel::ParallelContext sequence_parallel(int sp, const std::string& mode) {
  dist::ParallelDims::Options o;
  o.sp = sp;
  o.sp_mode = mode;
  return parallel::ParallelContext::from(dist::ParallelDims(o));
}

struct Pass {
  torch::Tensor velocity, loss;
  std::map<std::string, torch::Tensor> grads;
};

// One forward and backward of a mean-squared loss on the whole velocity; under sequence
// parallelism the gradients are summed over the group, as the hybrid plugin does.
Pass run(const parallel::ParallelContext& ctx, bool checkpointing) {
  torch::manual_seed(11);
  StditOptions o{.in_channels = 4, .hidden = 32, .depth = 2, .heads = 4, .text_dim = 16, .text_tokens = 6,
                 .activation_checkpointing = checkpointing};
  Stdit model(o, ctx);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->named_parameters())
      if (p.key().find("final_linear") != std::string::npos) p.value().normal_(0, 0.1);
  }
  const auto x = torch::randn({2, 4, 2, 8, 4}), target = torch::randn({2, 4, 2, 8, 4});  // S = 4 x 2 patches
  const auto text = torch::randn({2, 6, 16});
  auto mask = torch::ones({2, 6}, torch::kBool);
  mask[1].narrow(0, 4, 2).fill_(false);
  Pass out;
  out.velocity = model->forward(x, torch::tensor({0.2, 0.7}), text, mask);
  out.loss = (out.velocity - target).pow(2).mean();
  out.loss.backward();
  for (const auto& p : model->named_parameters()) {
    if (p.key() == "null_text.tokens") continue;  // used only for dropped captions
    auto g = p.value().grad().clone();
    if (ctx.sp_size() > 1) dist::all_reduce(g, ctx.sp);
    out.grads[p.key()] = g;
  }
  return out;
}

TEST(Stdit, SequenceParallelEqualsOneProcess) {
  colossal::testing::run_ranks(2, [] {
    const auto want = run({}, false);
    for (bool checkpointing : {false, true}) {
      const auto got = run(sequence_parallel(2, "all_to_all"), checkpointing);
      const std::string what = checkpointing ? "sp 2, checkpointed" : "sp 2";
      EXPECT_TRUE(torch::allclose(got.velocity, want.velocity, 1e-5, 1e-6)) << what;
      EXPECT_NEAR(got.loss.item<double>(), want.loss.item<double>(), 1e-5 * want.loss.item<double>()) << what;
      ASSERT_EQ(got.grads.size(), want.grads.size());
      for (const auto& [name, g] : want.grads) {
        const double scale = g.abs().max().item<double>();
        EXPECT_GT(scale, 0) << name;
        EXPECT_LE((got.grads.at(name) - g).abs().max().item<double>(), 1e-5 * scale + 1e-7) << what << ": " << name;
      }
    }
  });
}

TEST(Stdit, SequenceParallelRefusesWhatItCannotSplit) {
  colossal::testing::run_ranks(2, [] {
    using colossal::testing::error_message_of;
    auto msg = error_message_of([] { Stdit(StditOptions{.hidden = 24, .heads = 3}, sequence_parallel(2, "all_to_all")); });
    EXPECT_NE(msg.find("3 heads do not split over sp 2"), std::string::npos) << msg;
    msg = error_message_of([] { Stdit(StditOptions{}, sequence_parallel(2, "ring_attn")); });
    EXPECT_NE(msg.find("sp_mode ring_attn: STDiT's attention is bidirectional"), std::string::npos) << msg;
    Stdit model(StditOptions{.in_channels = 4, .hidden = 16, .depth = 1, .heads = 2, .text_dim = 8, .text_tokens = 4},
                 sequence_parallel(2, "all_to_all"));
    const auto [tokens, mask] = model->null_text(1);
    msg = error_message_of([&] { model->forward(torch::randn({1, 4, 2, 6, 6}), torch::tensor({0.5}), tokens, mask); });
    EXPECT_NE(msg.find("9 spatial tokens per frame (3 x 3 patches) do not split over sp 2"), std::string::npos) << msg;
  });
}

}  // namespace sora_stdit_sp_test
