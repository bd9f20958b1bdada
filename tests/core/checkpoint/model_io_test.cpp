#include "core/checkpoint/model_io.h"

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/booster/booster.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::checkpoint {
namespace {

torch::nn::Sequential make_net(int64_t hidden = 16) {
  return torch::nn::Sequential(torch::nn::Linear(8, hidden),
                               torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})),
                               torch::nn::Linear(hidden, 2));
}

std::string shared_dir(const std::string& name) {
  // The same path on every rank of a test (the parent's pid is in the environment's port).
  return ::testing::TempDir() + "mio_" + name + "_" + std::getenv("MASTER_PORT");
}

void train(booster::Booster& b, booster::Boosted& x, torch::nn::Sequential& net, int steps) {
  torch::manual_seed(50 + dist::rank());
  for (int s = 0; s < steps; ++s) {
    x.optimizer->zero_grad();
    auto out = net->forward(torch::randn({4, 8}).to(x.compute_dtype)).to(torch::kFloat32);
    b.backward(out.pow(2).mean(), *x.optimizer);
    x.optimizer->step();
  }
}

TEST(ModelIO, SavedUnderDDPLoadsInOneProcessAndUnderMixedPrecision) {
  testing::run_ranks(2, [] {
    std::string dir = shared_dir("ddp");
    torch::manual_seed(1);
    auto net = make_net();
    auto opt = std::make_shared<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(1e-2));
    booster::Booster b(booster::make_plugin("ddp"));
    auto x = b.boost(net.ptr(), opt);
    train(b, x, net, 3);
    b.save_model(*x.optimizer, *net, dir, {.shard = true, .size_per_shard = 200});
    // Any process can read it back into a plain model.
    torch::manual_seed(2);
    auto fresh = make_net();
    auto report = load_model_state(*fresh, dir);
    EXPECT_TRUE(report.clean()) << report.describe();
    auto a = net->parameters(), c = fresh->parameters();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], c[i])) << "parameter " << i;
    // And into a bf16 DDP model: the fp32 masters get the exact values, the working copy follows.
    torch::manual_seed(3);
    auto mixed = make_net();
    auto opt2 = std::make_shared<torch::optim::AdamW>(mixed->parameters());
    booster::DDPPlugin::Options o;
    o.precision = "bf16";
    booster::Booster b2(std::make_shared<booster::DDPPlugin>(o));
    auto y = b2.boost(mixed.ptr(), opt2);
    auto r2 = b2.load_model(*y.optimizer, *mixed, dir);
    EXPECT_TRUE(r2.clean()) << r2.describe();
    auto masters = y.optimizer->inner().param_groups()[0].params();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(masters[i], a[i])) << "master " << i;
      EXPECT_TRUE(torch::equal(mixed->parameters()[i], a[i].to(y.compute_dtype))) << "working " << i;
    }
    // Saving from mixed precision writes the fp32 masters, not the rounded copies.
    std::string dir2 = shared_dir("mixed");
    b2.save_model(*y.optimizer, *mixed, dir2);
    CheckpointReader r(dir2);
    EXPECT_EQ(r.info("0.weight").dtype, c10::kFloat);
    EXPECT_TRUE(torch::equal(r.view("0.weight"), a[0]));
  });
}

TEST(ModelIO, StrictLoadReportsEveryDifferenceAtOnce) {
  std::string dir = ::testing::TempDir() + "mio_strict_" + std::to_string(::getpid());
  torch::manual_seed(1);
  auto saved = make_net(16);
  auto state = model_state(*saved);
  state.emplace_back("extra.scale", torch::ones({3}));
  save_model_state(state, dir, {.dtype = torch::kBFloat16});

  // Different hidden width: every shape differs; plus a missing module.
  auto other = torch::nn::Sequential(torch::nn::Linear(8, 32),
                                     torch::nn::LayerNorm(torch::nn::LayerNormOptions({32})),
                                     torch::nn::Linear(32, 2), torch::nn::Linear(2, 2));
  auto before = other->parameters()[0].detach().clone();
  auto msg = testing::error_message_of([&] { load_model_state(*other, dir); });
  EXPECT_NE(msg.find("nothing was loaded"), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing in the checkpoint: 3.weight; 3.bias"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not in the model: extra.scale"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0.weight: checkpoint [16, 8] BF16, model [32, 8] F32"), std::string::npos) << msg;
  EXPECT_TRUE(torch::equal(other->parameters()[0], before)) << "strict failure must not load anything";

  auto report = load_model_state(*other, dir, {.strict = false});
  EXPECT_EQ(report.missing, (std::vector<std::string>{"3.weight", "3.bias"}));
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"extra.scale"});
  // 2.bias has the same shape [2] in both: it loads (converted from bf16); the rest are skipped.
  EXPECT_EQ(report.converted, std::vector<std::string>{"2.bias: BF16 -> F32"});
  EXPECT_TRUE(torch::equal(other[2]->as<torch::nn::Linear>()->bias,
                           saved[2]->as<torch::nn::Linear>()->bias.to(torch::kBFloat16).to(torch::kFloat32)));
}

// A checkpoint in another layout, read through LoadModelOptions::adapt: one fused, transposed
// matrix presented as the model's two linear layers (derived tensors), the stored name hidden;
// a derived tensor of the wrong shape is named.
TEST(ModelIO, AdaptedCheckpointLoadsUnderTheModelsNames) {
  std::string dir = ::testing::TempDir() + "mio_adapt_" + std::to_string(::getpid());
  torch::manual_seed(2);
  auto fused = torch::randn({8, 12});  // [in, out of both]: a Conv1D-style layout
  save_model_state({{"fused.weight", fused}, {"a.bias", torch::randn({6})}, {"b.bias", torch::randn({6})}}, dir);
  torch::nn::Sequential net;
  net->push_back("a", torch::nn::Linear(8, 6));
  net->push_back("b", torch::nn::Linear(8, 6));
  LoadModelOptions options;
  options.adapt = [](CheckpointReader& r) {
    for (int k = 0; k < 2; ++k)
      r.derive(k == 0 ? "a.weight" : "b.weight", torch::kFloat, {6, 8},
               [k](const CheckpointReader& f) { return f.view("fused.weight").narrow(1, 6 * k, 6).t(); });
    r.hide("fused.weight");
  };
  auto report = load_model_state(*net, dir, options);
  EXPECT_TRUE(report.clean()) << report.describe();
  EXPECT_TRUE(torch::equal(net[0]->as<torch::nn::Linear>()->weight, fused.narrow(1, 0, 6).t()));
  EXPECT_TRUE(torch::equal(net[1]->as<torch::nn::Linear>()->weight, fused.narrow(1, 6, 6).t()));
  // Without the hide, the stored tensor is still there: reported as not in the model.
  options.adapt = [](CheckpointReader& r) {
    for (const char* name : {"a.weight", "b.weight"})
      r.derive(name, torch::kFloat, {6, 8},
               [](const CheckpointReader& f) { return f.view("fused.weight").narrow(1, 0, 6).t(); });
  };
  report = load_model_state(*net, dir, {.strict = false, .adapt = options.adapt});
  EXPECT_EQ(report.unexpected, std::vector<std::string>{"fused.weight"});
  // A derived tensor that does not come out as declared is an error naming it.
  options.adapt = [](CheckpointReader& r) {
    r.derive("a.weight", torch::kFloat, {6, 8}, [](const CheckpointReader& f) { return f.view("fused.weight"); });
    r.derive("b.weight", torch::kFloat, {6, 8}, [](const CheckpointReader& f) { return f.view("fused.weight"); });
    r.hide("fused.weight");
  };
  auto msg = testing::error_message_of([&] { load_model_state(*net, dir, options); });
  EXPECT_NE(msg.find("derived tensor 'a.weight' came out [8, 12], expected [6, 8]"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::checkpoint
