// The preference losses against their definitions, written out here per pair in float64 with
// std:: functions, and their gradients against central differences of those definitions.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/posttrain/preference_loss.h"
#include "tests/support/errors.h"

namespace colossal::posttrain {
namespace {

double log_sigmoid(double z) { return z >= 0 ? -std::log1p(std::exp(-z)) : z - std::log1p(std::exp(z)); }

// Per-pair inputs: summed log-probs (policy, reference) and token counts.
struct Pairs {
  std::vector<double> c, r, rc, rr, nc, nr;
};

// The definitions, mean over pairs.
double definition(const Pairs& p, const PreferenceLossOptions& o) {
  const size_t B = p.c.size();
  double total = 0, nll_sum = 0, chosen_tokens = 0;
  for (size_t i = 0; i < B; ++i) {
    nll_sum -= p.c[i];
    chosen_tokens += p.nc[i];
  }
  for (size_t i = 0; i < B; ++i) {
    const double eps = o.label_smoothing, b = o.beta;
    if (o.loss_type == "sigmoid") {
      const double h = (p.c[i] - p.r[i]) - (p.rc[i] - p.rr[i]);
      total += -(1 - eps) * log_sigmoid(b * h) - eps * log_sigmoid(-b * h);
    } else if (o.loss_type == "ipo") {
      const double h = (p.c[i] / p.nc[i] - p.r[i] / p.nr[i]) - (p.rc[i] / p.nc[i] - p.rr[i] / p.nr[i]);
      total += (h - 1 / (2 * b)) * (h - 1 / (2 * b));
    } else if (o.loss_type == "simpo") {
      const double z = b * (p.c[i] / p.nc[i] - p.r[i] / p.nr[i]) - o.simpo_gamma;
      total += -(1 - eps) * log_sigmoid(z) - eps * log_sigmoid(-z);
    } else {  // orpo
      const double ac = p.c[i] / p.nc[i], ar = p.r[i] / p.nr[i];
      const double log_odds = (ac - std::log1p(-std::exp(ac))) - (ar - std::log1p(-std::exp(ar)));
      total += nll_sum / chosen_tokens - b * log_sigmoid(log_odds);
    }
  }
  return total / static_cast<double>(B);
}

torch::Tensor t(const std::vector<double>& v, torch::Dtype dtype) { return torch::tensor(v, torch::kFloat64).to(dtype); }

TEST(PreferenceLoss, EveryLossEqualsItsDefinitionWithGradients) {
  // Log-probabilities as a model gives them: negative sums, per-token means in (-6, -0.05).
  Pairs p{{-12.5, -3.0, -40.2, -7.7}, {-14.0, -2.2, -38.9, -9.9}, {-13.1, -2.9, -41.0, -8.0},
          {-13.5, -2.6, -39.5, -9.0},  {5, 2, 12, 4},            {6, 3, 10, 4}};
  for (const std::string loss : {"sigmoid", "ipo", "simpo", "orpo"}) {
    for (double smoothing : {0.0, 0.1}) {
      if (smoothing > 0 && (loss == "ipo" || loss == "orpo")) continue;
      PreferenceLossOptions o{.loss_type = loss, .beta = 0.3, .label_smoothing = smoothing, .simpo_gamma = 0.4};
      SCOPED_TRACE(loss + ", label smoothing " + std::to_string(smoothing));
      auto chosen = t(p.c, torch::kFloat64).requires_grad_(true);
      auto rejected = t(p.r, torch::kFloat64).requires_grad_(true);
      PairLogProbs in{chosen, rejected, t(p.nc, torch::kFloat64), t(p.nr, torch::kFloat64),
                      t(p.rc, torch::kFloat64), t(p.rr, torch::kFloat64)};
      auto out = preference_loss(in, o);
      EXPECT_NEAR(out.loss.item<double>(), definition(p, o), 1e-12);
      out.loss.backward();
      // Central differences of the definition, per input.
      for (int side = 0; side < 2; ++side) {
        auto grad = (side == 0 ? chosen : rejected).grad();
        for (size_t i = 0; i < p.c.size(); ++i) {
          const double h = 1e-6;
          Pairs up = p, down = p;
          (side == 0 ? up.c : up.r)[i] += h;
          (side == 0 ? down.c : down.r)[i] -= h;
          const double numeric = (definition(up, o) - definition(down, o)) / (2 * h);
          EXPECT_NEAR(grad[static_cast<int64_t>(i)].item<double>(), numeric, 1e-7)
              << (side == 0 ? "chosen " : "rejected ") << i;
        }
      }
      // fp32 inputs: the same value within fp32 rounding.
      PairLogProbs in32{t(p.c, torch::kFloat), t(p.r, torch::kFloat), t(p.nc, torch::kFloat), t(p.nr, torch::kFloat),
                        t(p.rc, torch::kFloat), t(p.rr, torch::kFloat)};
      EXPECT_NEAR(preference_loss(in32, o).loss.item<double>(), definition(p, o), 1e-5 * (1 + definition(p, o)));
      // Rewards as TRL reports them.
      const auto reward = [&](size_t i, bool c) {
        const double n = c ? p.nc[i] : p.nr[i], pol = c ? p.c[i] : p.r[i], ref = c ? p.rc[i] : p.rr[i];
        if (loss == "sigmoid" || loss == "ipo") return o.beta * (pol - ref);
        return o.beta * pol / n;
      };
      for (size_t i = 0; i < p.c.size(); ++i) {
        EXPECT_NEAR(out.chosen_rewards[static_cast<int64_t>(i)].item<double>(), reward(i, true), 1e-12);
        EXPECT_NEAR(out.rejected_rewards[static_cast<int64_t>(i)].item<double>(), reward(i, false), 1e-12);
      }
      EXPECT_FALSE(out.chosen_rewards.requires_grad());
    }
  }
}

TEST(PreferenceLoss, OrpoNllDividesByTheGivenTokenCount) {
  // A replica's share of a global batch: its chosen answers' NLL over the count it is given.
  auto c = torch::tensor({-6.0, -9.0}, torch::kFloat64), r = torch::tensor({-7.0, -8.0}, torch::kFloat64);
  auto nc = torch::tensor({3.0, 3.0}, torch::kFloat64), nr = torch::tensor({4.0, 2.0}, torch::kFloat64);
  PreferenceLossOptions o{.loss_type = "orpo", .beta = 0.5};
  PairLogProbs own{c, r, nc, nr}, given{c, r, nc, nr};
  given.nll_tokens = 10;
  const double shift = preference_loss(given, o).loss.item<double>() - preference_loss(own, o).loss.item<double>();
  EXPECT_NEAR(shift, 15.0 / 10 - 15.0 / 6, 1e-12);
}

TEST(PreferenceLoss, PairwiseRewardLossAndErrors) {
  auto c = torch::tensor({1.5, -0.5, 2.0}, torch::kFloat64).requires_grad_(true);
  auto r = torch::tensor({0.5, 0.5, -1.0}, torch::kFloat64);
  auto loss = pairwise_reward_loss(c, r);
  double expected = 0;
  for (int i = 0; i < 3; ++i) expected -= log_sigmoid(c[i].item<double>() - r[i].item<double>()) / 3;
  EXPECT_NEAR(loss.item<double>(), expected, 1e-12);
  loss.backward();
  for (int i = 0; i < 3; ++i)  // d/dc -log s(c - r) / 3 = -(1 - s(c - r)) / 3
    EXPECT_NEAR(c.grad()[i].item<double>(),
                -(1 - 1 / (1 + std::exp(-(c[i].item<double>() - r[i].item<double>())))) / 3, 1e-12);

  auto x = torch::tensor({-3.0, -4.0});
  auto msg = testing::error_message_of([&] { preference_loss({x, x}, {}); });
  EXPECT_NE(msg.find("the reference model's log-probabilities [B] are needed"), std::string::npos) << msg;
  msg = testing::error_message_of(
      [&] { preference_loss({x, x, torch::tensor({2.0, 0.0}), torch::tensor({1.0, 1.0})}, {.loss_type = "simpo"}); });
  EXPECT_NE(msg.find("an answer with no token to score"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { preference_loss({x, x, x, x, x, x}, {.loss_type = "kto"}); });
  EXPECT_NE(msg.find("expected sigmoid, ipo, simpo or orpo, got 'kto'"), std::string::npos) << msg;
  msg = testing::error_message_of(
      [&] { preference_loss({x, x, x, x, x, x}, {.loss_type = "ipo", .label_smoothing = 0.1}); });
  EXPECT_NE(msg.find("label_smoothing applies to the sigmoid and simpo losses"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { pairwise_reward_loss(x, torch::zeros({3})); });
  EXPECT_NE(msg.find("scores differ in shape"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::posttrain
