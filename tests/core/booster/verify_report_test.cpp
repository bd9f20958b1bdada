// colossal verify's two halves below the launcher: comparing two recordings (VerifyReport) and
// assembling whole gradients from the pieces ranks hold (FullGradients).
#include "core/booster/verify_report.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdio>

#include "core/booster/full_gradients.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/fs.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

struct Recording {
  double loss = 2.0;
  checkpoint::NamedTensors tensors;
};

std::string dir_for(const std::string& name) {
  return ::testing::TempDir() + "verify_report_" + std::to_string(::getpid()) + "/" + name;
}

void write(const std::string& dir, int64_t step, const Recording& r, const std::string& precision = "fp32") {
  fs::make_dirs(dir);
  char loss[40];
  std::snprintf(loss, sizeof loss, "%.17g", r.loss);
  checkpoint::save_safetensors(dir + "/step-" + std::to_string(step) + ".safetensors", r.tensors,
                               {{"loss", loss}, {"step", std::to_string(step)},
                                {"world_size", "1"}, {"layout", "test"}, {"precision", precision}});
}

Recording sample() {
  torch::manual_seed(0);
  return {2.0,
          {{"grad/a", torch::randn({4, 3})}, {"grad/b", torch::randn({5})},
           {"param/a", torch::randn({4, 3})}, {"param/b", torch::randn({5})}}};
}

TEST(VerifyReport, IdenticalRecordingsPass) {
  const auto ref = dir_for("same_ref"), got = dir_for("same_got");
  for (int64_t step : {1, 2}) {
    write(ref, step, sample());
    write(got, step, sample());
  }
  const auto report = compare_recordings(got, ref);
  EXPECT_TRUE(report.passed()) << report.text();
  ASSERT_EQ(report.steps.size(), 2u);
  EXPECT_EQ(report.steps[0].gradients, 2);
  EXPECT_EQ(report.steps[0].parameters, 2);
  EXPECT_NE(report.text().find("PASS"), std::string::npos);
}

// A gradient's difference is max|a - b| over its max |value| (at least 1e-4 of the model's
// largest gradient), a parameter's over the model's largest weight: a tiny element changing by a
// lot relative to itself does not fail, a uniform factor shows as itself and gets a hint.
TEST(VerifyReport, DifferencesAreRelativeToTheTensorAndNamed) {
  const auto ref = dir_for("diff_ref"), got = dir_for("diff_got");
  auto want = sample(), have = sample();
  want.tensors[2].second[0][0] = 1e-9;  // param/a: an element near zero...
  have.tensors[2].second[0][0] = 3e-9;  // ...off by 200% of itself, 2e-9 of the tensor
  for (size_t i : {0, 1}) have.tensors[i].second = have.tensors[i].second * 0.5;  // every gradient halved
  // A gradient that is zero in exact arithmetic (rounding noise, 1e-10 against gradients of ~1):
  // 100% apart, yet not a difference, and not counted in the "every gradient" factor.
  want.tensors.push_back({"grad/noise", torch::full({3}, 1e-10)});
  have.tensors.push_back({"grad/noise", torch::full({3}, -1e-10)});
  have.loss = 2.0 * (1 + 1e-7);
  write(ref, 1, want);
  write(got, 1, have);
  const auto report = compare_recordings(got, ref);
  EXPECT_FALSE(report.passed());
  ASSERT_EQ(report.problems.size(), 2u) << report.text();  // the two gradients, not the loss or the parameter
  EXPECT_NE(report.problems[0].find("step 1: gradient of 'a' differs by"), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[0].find("(relative 0.5 > 0.0001)"), std::string::npos) << report.problems[0];
  ASSERT_EQ(report.hints.size(), 1u);
  EXPECT_NE(report.hints[0].find("every gradient is 0.5 x one process's"), std::string::npos) << report.hints[0];
  EXPECT_LT(report.steps[0].parameter.relative, 1e-8);
  // The same with looser tolerances given: passes.
  EXPECT_TRUE(compare_recordings(got, ref, {.gradient = 0.6}).passed());
}

// A loss that is zero in exact arithmetic (GRPO's on-policy objective) is rounding on both sides:
// far apart relatively, so only an absolute tolerance, when given, accepts it.
TEST(VerifyReport, ALossNearZeroPassesOnlyWithinAGivenAbsoluteTolerance) {
  const auto ref = dir_for("zero_loss_ref"), got = dir_for("zero_loss_got");
  auto want = sample(), have = sample();
  want.loss = -1.2e-8;
  have.loss = -1.3e-8;
  write(ref, 1, want);
  write(got, 1, have);
  const auto strict = compare_recordings(got, ref);
  ASSERT_EQ(strict.problems.size(), 1u) << strict.text();
  EXPECT_NE(strict.problems[0].find("step 1: loss"), std::string::npos) << strict.problems[0];
  const auto loose = compare_recordings(got, ref, {.loss_abs = 1e-6});
  EXPECT_TRUE(loose.passed()) << loose.text();
  EXPECT_NE(loose.text().find("loss within 1e-06 absolute"), std::string::npos) << loose.text();
  // The absolute tolerance does not hide a loss that is not near zero.
  have.loss = 2.0;
  want.loss = 2.1;
  write(ref, 1, want);
  write(got, 1, have);
  EXPECT_FALSE(compare_recordings(got, ref, {.loss_abs = 1e-6}).passed());
}

TEST(VerifyReport, MissingStepsTensorsAndShapesAreProblemsAMissingGradientANote) {
  const auto ref = dir_for("miss_ref"), got = dir_for("miss_got");
  auto have = sample();
  have.tensors.erase(have.tensors.begin());                                    // grad/a: kept on NVMe
  have.tensors.back().second = torch::zeros({6});                             // param/b: another shape
  write(ref, 1, sample());
  write(ref, 2, sample());
  write(got, 1, have);
  const auto report = compare_recordings(got, ref);
  const auto text = report.text();
  EXPECT_NE(text.find("step 2: recorded by one process, not by the layout"), std::string::npos) << text;
  EXPECT_NE(text.find("note: step 1: gradient of 'a' not recorded by the layout"), std::string::npos) << text;
  EXPECT_NE(text.find("step 1: parameter of 'b' has shape [6] against [5]"), std::string::npos) << text;
  EXPECT_EQ(report.problems.size(), 2u) << text;
}

TEST(VerifyReport, AMissingRecordingIsNamed) {
  const auto ref = dir_for("only_ref");
  write(ref, 1, sample());
  auto msg = testing::error_message_of([&] { compare_recordings(dir_for("nowhere"), ref); });
  EXPECT_NE(msg.find("no recording at '" + dir_for("nowhere") + "'"), std::string::npos) << msg;
  fs::make_dirs(dir_for("empty"));
  msg = testing::error_message_of([&] { compare_recordings(dir_for("empty"), ref); });
  EXPECT_NE(msg.find("holds no recorded step"), std::string::npos) << msg;
}

// Pieces over 2 ranks: one parameter split in halves (ZeRO), one held whole by both (replicas,
// averaged), one covered only in part (streamed elsewhere: left out).
TEST(FullGradients, PiecesAcrossRanksAssembleWhole) {
  testing::run_ranks(2, [] {
    torch::nn::Module model;
    auto split = model.register_parameter("split", torch::zeros({2, 3}));
    auto whole = model.register_parameter("whole", torch::zeros({4}));
    auto partial = model.register_parameter("partial", torch::zeros({4}));
    const int r = dist::rank();
    auto piece = [](const torch::Tensor& grad) {
      auto t = torch::zeros_like(grad).requires_grad_(true);
      t.mutable_grad() = grad;
      return t;
    };
    auto full = torch::arange(6, torch::kFloat32);
    std::vector<checkpoint::OptimizerSlice> slices = {
        {"split", 3 * r, piece(full.narrow(0, 3 * r, 3)), 6},
        {"whole", 0, piece(torch::full({4}, 1.0f + r)), -1},
    };
    if (r == 0) slices.push_back({"partial", 0, piece(torch::ones({2})), 4});
    auto world = dist::world_group();
    auto grads = assemble_gradients(model, slices, &world);
    ASSERT_EQ(grads.size(), 2u);
    EXPECT_EQ(grads[0].first, "split");
    EXPECT_TRUE(torch::equal(grads[0].second, full.view({2, 3})));
    EXPECT_EQ(grads[1].first, "whole");
    EXPECT_TRUE(torch::allclose(grads[1].second, torch::full({4}, 1.5f)));
  });
}

}  // namespace
}  // namespace colossal::booster
