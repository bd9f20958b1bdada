// The pipeline runtime against one process: a 9-layer MLP split over 2 and 4 pipeline ranks
// (uneven layer counts), every schedule — gpipe, 1f1b, interleaved, zbh1, zbv — on the same
// global batch: the loss on every rank, every parameter's gradient and the parameters after two
// AdamW steps within 1e-5 relative (fp32). Also: the layer split rules, and a dead stage named.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/dist/runtime.h"
#include "core/parallel/pipeline/runner.h"
#include "core/parallel/pipeline/stage_split.h"
#include "tests/support/errors.h"
#include "tests/support/adam_tolerance.h"
#include "tests/support/multirank.h"

namespace colossal::parallel::pipeline {
namespace {

constexpr int kLayers = 9, kWidth = 8, kMicro = 8, kRows = 2;  // 8 microbatches of 2 rows

struct Mlp {
  std::vector<torch::nn::Linear> layers;
  Mlp() {
    torch::manual_seed(3);
    for (int i = 0; i < kLayers; ++i) layers.emplace_back(kWidth, kWidth);
  }
  torch::Tensor run(torch::Tensor x, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x = torch::tanh(layers[i]->forward(x));
    return x;
  }
  std::vector<torch::Tensor> params(int64_t begin, int64_t end) {
    std::vector<torch::Tensor> out;
    for (int64_t i = begin; i < end; ++i)
      for (auto& p : layers[i]->parameters()) out.push_back(p);
    return out;
  }
};

std::pair<torch::Tensor, torch::Tensor> batch(int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  return {torch::randn({kMicro * kRows, kWidth}, gen), torch::randn({kMicro * kRows, kWidth}, gen)};
}

struct Result {
  std::vector<double> losses;
  std::vector<torch::Tensor> grads, params;  // layer-ordered, for the layers this rank holds
};

// One process, the whole batch.
Result reference(const std::vector<std::pair<int64_t, int64_t>>& mine) {
  Mlp net;
  std::vector<torch::Tensor> all = net.params(0, kLayers);
  torch::optim::AdamW opt(all, torch::optim::AdamWOptions(1e-2));
  Result r;
  for (int step = 0; step < 2; ++step) {
    auto [x, y] = batch(step);
    opt.zero_grad();
    auto loss = torch::mse_loss(net.run(x, 0, kLayers), y);
    loss.backward();
    r.losses.push_back(loss.item<double>());
    if (step == 0)
      for (auto [b, e] : mine)
        for (auto& p : net.params(b, e)) r.grads.push_back(p.grad().clone());
    opt.step();
  }
  for (auto [b, e] : mine)
    for (auto& p : net.params(b, e)) r.params.push_back(p.detach().clone());
  return r;
}

void expect_matches_one_process(const std::string& kind, int chunks) {
  const int p = dist::world_size(), r = dist::rank();
  Schedule schedule({.kind = kind, .stages = p, .microbatches = kMicro, .chunks = chunks});
  const auto ranges = split_layers(kLayers, schedule.virtual_stages());
  std::vector<std::pair<int64_t, int64_t>> mine;  // by chunk
  for (int c = 0; c < chunks; ++c) mine.push_back(ranges[schedule.virtual_stage(r, c)]);
  std::vector<std::pair<int64_t, int64_t>> sorted = mine;
  std::sort(sorted.begin(), sorted.end());
  const auto want = reference(sorted);

  Mlp net;
  StageFunctions fns;
  fns.forward = [&](int c, const torch::Tensor& x) { return net.run(x, mine[c].first, mine[c].second); };
  fns.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
  fns.parameters = [&](int c) { return net.params(mine[c].first, mine[c].second); };
  std::vector<torch::Tensor> held;
  for (auto [b, e] : sorted)
    for (auto& t : net.params(b, e)) held.push_back(t);
  torch::optim::AdamW opt(held, torch::optim::AdamWOptions(1e-2));
  PipelineRunner runner(schedule, dist::world_group());
  for (int step = 0; step < 2; ++step) {
    auto [x, y] = batch(step);
    opt.zero_grad();
    const double loss = runner.run(fns, x.split(kRows), y.split(kRows));
    EXPECT_NEAR(loss, want.losses[step], 1e-5 * std::abs(want.losses[step])) << kind << " step " << step;
    if (step == 0) {
      ASSERT_EQ(held.size(), want.grads.size());
      for (size_t i = 0; i < held.size(); ++i) {
        ASSERT_TRUE(held[i].grad().defined()) << kind << " parameter " << i << " got no gradient";
        EXPECT_TRUE(torch::allclose(held[i].grad(), want.grads[i], 1e-5, 1e-7)) << kind << " gradient " << i;
      }
      EXPECT_LE(runner.peak_live(), simulate(schedule).peak_live[r]) << kind;
    }
    opt.step();
  }
  // Microbatches sum the gradient in another order (they match to 1e-5 above); Adam turns that
  // rounding into visible steps only where a gradient is near zero (tests/support/adam_tolerance.h).
  for (size_t i = 0; i < held.size(); ++i)
    testing::expect_adam_params_close(held[i], want.params[i], want.grads[i], 1e-2, 2, 1e-5, 1e-5,
                                      kind + " parameter " + std::to_string(i) + " after 2 steps");
}

void every_schedule() {
  expect_matches_one_process("gpipe", 1);
  expect_matches_one_process("1f1b", 1);
  expect_matches_one_process("interleaved", 2);
  expect_matches_one_process("zbh1", 1);
  expect_matches_one_process("zbv", 2);
}

TEST(PipelineRunner, EverySchedule2StagesMatchesOneProcess) { testing::run_ranks(2, every_schedule); }
TEST(PipelineRunner, EverySchedule4StagesMatchesOneProcess) { testing::run_ranks(4, every_schedule); }

// A stage that dies mid-step: the other stage's receive fails within the timeout, naming what it
// waited for (virtual stage, microbatch, peer) and the dead rank.
TEST(PipelineRunner, AKilledStageEndsTheStepWithItsName) {
  constexpr double kTimeout = 20;
  constexpr int kCaught = 3;
  if (testing::is_rank_process()) {
    dist::init();
    auto warm = torch::ones({4});
    dist::all_reduce(warm, dist::world_group());  // both connected before the failure
    if (dist::rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ::raise(SIGKILL);
    }
    Mlp net;
    StageFunctions fns;
    fns.forward = [&](int, const torch::Tensor& x) { return net.run(x, 0, 4); };
    fns.loss = [](const torch::Tensor& out, const torch::Tensor& y) { return torch::mse_loss(out, y); };
    fns.parameters = [&](int) { return net.params(0, 4); };
    PipelineRunner runner(Schedule({.kind = "1f1b", .stages = 2, .microbatches = 2}), dist::world_group());
    auto [x, y] = batch(0);
    try {
      runner.run(fns, x.split(kRows), y.split(kRows));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "CAUGHT: %s\n", e.what());  // (the test reads it from the output)
      std::fflush(stderr);
      ::_exit(kCaught);
    }
    ::_exit(0);
  }
  testing::RankLaunchOptions o;
  o.world_size = 2;
  o.env["COLOSSAL_DIST_TIMEOUT"] = std::to_string(kTimeout);
  auto results = testing::launch_ranks(o);
  EXPECT_TRUE(results[1].killed_by(SIGKILL)) << results[1].describe();
  EXPECT_TRUE(results[0].exited_with(kCaught)) << results[0].describe();
  EXPECT_LT(results[0].seconds, kTimeout) << "must end within the timeout";
  for (const char* text : {"waiting for the gradient out of virtual stage 0, microbatch 0 from pipeline rank 1",
                           "rank 1"})
    EXPECT_NE(results[0].output.find(text), std::string::npos) << "expected '" << text << "' in\n"
                                                               << results[0].describe();
}

TEST(PipelineSchedule, LayersSplitEvenlyWithTheRestInTheMiddle) {
  using R = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(split_layers(9, 4), (R{{0, 2}, {2, 5}, {5, 7}, {7, 9}}));  // 2 3 2 2: the middle first
  EXPECT_EQ(split_layers(11, 4), (R{{0, 3}, {3, 6}, {6, 9}, {9, 11}}));  // 3 3 3 2: then the first
  EXPECT_EQ(split_layers(5, 2), (R{{0, 3}, {3, 5}}));
  EXPECT_EQ(split_layers_by_cost({{1, 1, 1, 1, 4, 4}}, 3), (R{{0, 4}, {4, 5}, {5, 6}}));
  // The head's cost on the last stage and the embedding's on the first move layers inward.
  EXPECT_EQ(split_layers_by_cost({std::vector<double>(8, 1.0), 0, 2}, 2), (R{{0, 5}, {5, 8}}));
  EXPECT_EQ(split_layers_by_cost({std::vector<double>(8, 1.0), 2, 0}, 2), (R{{0, 3}, {3, 8}}));
  EXPECT_EQ(split_layers_by_cost({std::vector<double>(11, 1.0), 0, 1}, 4), (R{{0, 3}, {3, 6}, {6, 9}, {9, 11}}));
  auto msg = testing::error_message_of([] { split_layers(3, 4); });
  EXPECT_NE(msg.find("3 layers cannot fill 4 virtual stages"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::parallel::pipeline
