// DDP against a single process on the global batch (same seed, same data): losses every step and
// parameters after training within relative 1e-5 (fp32).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/ddp_plugin.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

constexpr int64_t kIn = 12, kHidden = 24, kOut = 3, kGlobalBatch = 8;

struct ToyNetImpl : torch::nn::Module {
  ToyNetImpl(bool with_unused_branch = false) {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, kHidden));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHidden})));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kOut));
    if (with_unused_branch) unused = register_module("unused", torch::nn::Linear(kHidden, kOut));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc2(torch::gelu(norm(fc1(x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(ToyNet);

// Deterministic data for `steps` steps of the global batch.
std::pair<torch::Tensor, torch::Tensor> make_data(int steps) {
  torch::manual_seed(1234);
  auto x = torch::randn({steps, kGlobalBatch, kIn});
  auto y = torch::randn({steps, kGlobalBatch, kOut});
  return {x, y};
}

ToyNet make_model(uint64_t seed, bool unused = false) {
  torch::manual_seed(seed);
  return ToyNet(unused);
}

struct Trace {
  std::vector<double> losses;
  std::vector<double> norms;
  std::vector<torch::Tensor> params;
};

struct TrainOptions {
  int steps = 5;
  int micro_batches = 1;    // gradient accumulation
  double clip = 0;          // 0 = no clipping
  double weight_decay = 0.01;
  bool unused_branch = false;
};

std::vector<torch::Tensor> snapshot(const ToyNet& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

// The reference: one process, the whole global batch, plain LibTorch.
Trace train_single(const TrainOptions& o) {
  auto [x, y] = make_data(o.steps);
  auto model = make_model(/*seed=*/7, o.unused_branch);
  torch::optim::AdamW opt(model->parameters(),
                          torch::optim::AdamWOptions(1e-2).weight_decay(o.weight_decay));
  Trace t;
  for (int s = 0; s < o.steps; ++s) {
    opt.zero_grad();
    auto loss = torch::mse_loss(model->forward(x[s]), y[s]);
    loss.backward();
    if (o.clip > 0) t.norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), o.clip));
    opt.step();
    t.losses.push_back(loss.item<double>());
  }
  t.params = snapshot(model);
  return t;
}

// The same training through the Booster with DDP: each rank takes its rows of the global batch
// and starts from a different initialisation (rank 0's must win through the broadcast).
Trace train_ddp(const TrainOptions& o, DDPPlugin::Options plugin_options = {}) {
  auto [x, y] = make_data(o.steps);
  int n = dist::world_size(), r = dist::rank();
  int64_t local = kGlobalBatch / n;
  auto model = make_model(/*seed=*/r == 0 ? 7 : 1000 + r, o.unused_branch);
  auto opt = std::make_shared<torch::optim::AdamW>(
      model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(o.weight_decay));
  Booster booster(std::make_shared<DDPPlugin>(plugin_options));
  auto b = booster.boost(model.ptr(), opt);
  Trace t;
  for (int s = 0; s < o.steps; ++s) {
    b.optimizer->zero_grad();
    auto xs = x[s].narrow(0, r * local, local);
    auto ys = y[s].narrow(0, r * local, local);
    int64_t micro = local / o.micro_batches;
    double step_loss = 0;
    for (int m = 0; m < o.micro_batches; ++m) {
      auto run = [&] {
        auto loss = torch::mse_loss(model->forward(xs.narrow(0, m * micro, micro)),
                                    ys.narrow(0, m * micro, micro)) /
                    o.micro_batches;
        booster.backward(loss, *b.optimizer);
        step_loss += loss.item<double>();
      };
      if (m + 1 < o.micro_batches) booster.no_sync(*b.optimizer, run);
      else run();
    }
    if (o.clip > 0) t.norms.push_back(booster.clip_grad_norm(*b.optimizer, o.clip));
    b.optimizer->step();
    auto l = torch::tensor({step_loss}, torch::kFloat64);
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
    t.losses.push_back(l.item<double>());
  }
  t.params = snapshot(model);
  return t;
}

void expect_close(const Trace& got, const Trace& want) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s]))
        << "loss at step " << s;
  }
  ASSERT_EQ(got.norms.size(), want.norms.size());
  for (size_t s = 0; s < want.norms.size(); ++s) {
    EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * want.norms[s]) << "grad norm at step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    auto diff = (got.params[i] - want.params[i]).abs();
    auto tol = want.params[i].abs() * 1e-5 + 1e-7;
    EXPECT_TRUE(torch::all(diff <= tol).item<bool>())
        << "parameter " << i << " max abs diff " << diff.max().item<double>();
  }
}

TEST(DDP, TwoRanksMatchOneProcess) {
  testing::run_ranks(2, [] { expect_close(train_ddp({}), train_single({})); });
}

TEST(DDP, FourRanksMatchOneProcessWithSmallBuckets) {
  // 512-byte buckets: several buckets, launched in order while backward runs.
  DDPPlugin::Options opts;
  opts.bucket_bytes = 512;
  testing::run_ranks(4, [opts] { expect_close(train_ddp({}, opts), train_single({})); });
}

TEST(DDP, NoSyncAccumulationEqualsOneBigBatch) {
  TrainOptions o;
  o.micro_batches = 2;
  testing::run_ranks(2, [o] { expect_close(train_ddp(o), train_single({})); });
}

TEST(DDP, ClippingMatchesOneProcess) {
  TrainOptions o;
  o.clip = 0.05;  // small enough to clip every step
  testing::run_ranks(2, [o] {
    auto got = train_ddp(o);
    auto want = train_single(o);
    for (double n : want.norms) EXPECT_GT(n, o.clip) << "the test must actually clip";
    expect_close(got, want);
  });
}

TrainOptions with_unused_branch() {
  TrainOptions o;
  o.unused_branch = true;
  o.weight_decay = 0;  // an unused parameter then stays put, as in the reference
  return o;
}

TEST(DDP, UnusedParameterIsNamed) {
  testing::run_ranks(2, [] {
    auto o = with_unused_branch();
    auto msg = testing::error_message_of([&] { train_ddp(o); });
    EXPECT_NE(msg.find("these parameters got no gradient in this step: unused.bias, unused.weight"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("find_unused_parameters"), std::string::npos) << msg;
  });
}

TEST(DDP, UnusedParameterAllowedMatchesOneProcess) {
  testing::run_ranks(2, [] {
    auto o = with_unused_branch();
    DDPPlugin::Options allow;
    allow.find_unused_parameters = true;
    expect_close(train_ddp(o, allow), train_single(o));
  });
}

TEST(DDP, GradientsAreViewsIntoBuckets) {
  testing::run_ranks(2, [] {
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    Booster booster(make_plugin("ddp"));
    auto b = booster.boost(model.ptr(), opt);
    b.optimizer->zero_grad();
    // Parameters are stored in reverse order in the buckets: fc2.bias's gradient comes first.
    auto params = model->parameters();
    const float* first = params.back().grad().data_ptr<float>();
    const float* second = params[params.size() - 2].grad().data_ptr<float>();
    EXPECT_EQ(second, first + params.back().numel()) << "gradients must be adjacent bucket views";
    // Resetting gradients behind the Booster's back is repaired before the next backward.
    model->zero_grad();
    auto loss = model->forward(torch::ones({2, kIn})).sum();
    booster.backward(loss, *b.optimizer);
    EXPECT_EQ(params.back().grad().data_ptr<float>(), first);
  });
}

TEST(Booster, UnknownPluginListsTheKnownOnes) {
  auto msg = testing::error_message_of([] { make_plugin("zero9"); });
  EXPECT_NE(msg.find("unknown plugin 'zero9' (known: ddp)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::booster
