#pragma once
// A small model, deterministic data and two training loops shared by the parallel-strategy
// tests: the single-process reference (plain LibTorch on the global batch) and the same training
// through the Booster with any plugin (each rank takes its rows of the global batch).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/module_hooks.h"
#include "core/optim/fused_adamw.h"

namespace colossal::testing {

constexpr int64_t kIn = 12, kHidden = 24, kOut = 3, kGlobalBatch = 8;

struct ToyNetImpl : torch::nn::Module {
  ToyNetImpl(bool with_unused_branch = false) {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, kHidden));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kHidden})));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kOut));
    if (with_unused_branch) unused = register_module("unused", torch::nn::Linear(kHidden, kOut));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // Through colossal::nn::call so ZeRO-3 can gather each module's parameters on demand.
    return nn::call(fc2, torch::gelu(nn::call(norm, nn::call(fc1, x))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, unused{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(ToyNet);

// Deterministic data for `steps` steps of the global batch.
inline std::pair<torch::Tensor, torch::Tensor> make_data(int steps) {
  torch::manual_seed(1234);
  auto x = torch::randn({steps, kGlobalBatch, kIn});
  auto y = torch::randn({steps, kGlobalBatch, kOut});
  return {x, y};
}

inline ToyNet make_model(uint64_t seed, bool unused = false) {
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
  bool accumulate_with_no_sync = true;  // false: every micro-batch's backward synchronises
  double clip = 0;          // 0 = no clipping
  double weight_decay = 0.01;
  bool unused_branch = false;
  bool fused_adamw = false;  // colossal FusedAdamW instead of torch::optim::AdamW (Booster runs)
  c10::Device device = c10::kCPU;  // where the Booster run's model and data live
  std::string frozen;        // a module whose parameters are frozen (fc1 | fc2; a LoRA run's base)
};

// Freezes o.frozen's parameters; the ones left to train (what the optimizer gets).
inline std::vector<torch::Tensor> trainable(const ToyNet& m, const TrainOptions& o) {
  std::vector<torch::Tensor> out;
  for (auto& item : m->named_parameters()) {
    if (!o.frozen.empty() && item.key().rfind(o.frozen + ".", 0) == 0) item.value().set_requires_grad(false);
    else out.push_back(item.value());
  }
  return out;
}
inline std::vector<torch::Tensor> snapshot(const ToyNet& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m->parameters()) out.push_back(p.detach().clone());
  return out;
}

// The reference: one process, the whole global batch, plain LibTorch.
inline Trace train_single(const TrainOptions& o) {
  auto [x, y] = make_data(o.steps);
  auto model = make_model(/*seed=*/7, o.unused_branch);
  torch::optim::AdamW opt(trainable(model, o),
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

// The same training through the Booster with `plugin`: each rank takes its rows of the global batch
// and starts from a different initialisation (rank 0's must win through the broadcast).
inline Trace train_boosted(std::shared_ptr<booster::Plugin> plugin, const TrainOptions& o) {
  auto [x, y] = make_data(o.steps);
  int n = dist::world_size(), r = dist::rank();
  int64_t local = kGlobalBatch / n;
  auto model = make_model(/*seed=*/r == 0 ? 7 : 1000 + r, o.unused_branch);
  model->to(o.device);
  x = x.to(o.device);
  y = y.to(o.device);
  auto options = torch::optim::AdamWOptions(1e-2).weight_decay(o.weight_decay);
  std::shared_ptr<torch::optim::Optimizer> opt;
  if (o.fused_adamw) opt = std::make_shared<optim::FusedAdamW>(trainable(model, o), options);
  else opt = std::make_shared<torch::optim::AdamW>(trainable(model, o), options);
  booster::Booster booster(std::move(plugin));
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
        auto loss = torch::mse_loss(model->forward(xs.narrow(0, m * micro, micro).to(b.compute_dtype)).to(torch::kFloat32),
                                    ys.narrow(0, m * micro, micro)) /
                    o.micro_batches;
        booster.backward(loss, *b.optimizer);
        step_loss += loss.item<double>();
      };
      if (m + 1 < o.micro_batches && o.accumulate_with_no_sync) booster.no_sync(*b.optimizer, run);
      else run();
    }
    if (o.clip > 0) t.norms.push_back(booster.clip_grad_norm(*b.optimizer, o.clip));
    b.optimizer->step();
    auto l = torch::tensor({step_loss}, torch::kFloat64);
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
    t.losses.push_back(l.item<double>());
  }
  // Through the plugin: under ZeRO-3 parameters have no data outside forward and backward.
  auto state = b.optimizer->model_wrapper().checkpoint().full_model_state(*model);
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  for (const auto& item : model->named_parameters())
    t.params.push_back(by_name.at(item.key()).to(c10::kCPU, torch::kFloat32, false, true));
  return t;
}

/// `rtol`: 1e-5 for the same device (fp32: the math changes order only in reductions).
inline void expect_close(const Trace& got, const Trace& want, double rtol = 1e-5) {
  ASSERT_EQ(got.losses.size(), want.losses.size());
  for (size_t s = 0; s < want.losses.size(); ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], rtol * std::abs(want.losses[s]))
        << "loss at step " << s;
  }
  ASSERT_EQ(got.norms.size(), want.norms.size());
  for (size_t s = 0; s < want.norms.size(); ++s) {
    EXPECT_NEAR(got.norms[s], want.norms[s], rtol * want.norms[s]) << "grad norm at step " << s;
  }
  ASSERT_EQ(got.params.size(), want.params.size());
  for (size_t i = 0; i < want.params.size(); ++i) {
    auto diff = (got.params[i] - want.params[i]).abs();
    auto tol = want.params[i].abs() * rtol + 1e-7;
    EXPECT_TRUE(torch::all(diff <= tol).item<bool>())
        << "parameter " << i << " max abs diff " << diff.max().item<double>();
  }
}

}  // namespace colossal::testing
