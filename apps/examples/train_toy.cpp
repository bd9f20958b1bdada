// The whole Booster loop on a toy model: a small MLP regressor on synthetic data. Shows the one
// line that changes between one process and many (the plugin), gradient accumulation with
// no_sync, clipping, an LR schedule and mixed precision.
//
//   build/apps/train_toy                                   # one process
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_toy --precision bf16
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "core/booster/booster.h"
#include "core/nn/module_hooks.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/factory.h"
#include "core/optim/lr_scheduler.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
namespace optim = colossal::optim;

// Every module that owns parameters runs through colossal::nn::call, so ZeRO-3 can gather it.
struct ToyMLPImpl : torch::nn::Module {
  explicit ToyMLPImpl(int64_t hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(32, hidden));
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({hidden})));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, hidden));
    head = register_module("head", torch::nn::Linear(hidden, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    using colossal::nn::call;
    auto h = call(norm, torch::gelu(call(fc1, x)));
    return call(head, torch::gelu(call(fc2, h)));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, head{nullptr};
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(ToyMLP);

int main(int argc, char** argv) {
  CLI::App app{"train_toy: the Booster training loop on a toy regression model"};
  int steps = 200, batch = 64, grad_accum = 1, hidden = 256, seed = 0;
  double clip = 1.0;
  std::string precision = "fp32";
  optim::OptimizerOptions opt_options;
  opt_options.name = "fused_adamw";
  opt_options.lr = 3e-3;
  opt_options.weight_decay = 0.01;
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str();
  app.add_option("--batch_size", batch, "global batch size")->capture_default_str();
  app.add_option("--grad_accum", grad_accum, "micro-batches per step (no_sync)")->capture_default_str();
  app.add_option("--hidden", hidden, "hidden width")->capture_default_str();
  app.add_option("--precision", precision, "fp32 | bf16 | fp16")->capture_default_str();
  app.add_option("--optimizer", opt_options.name, "adamw | fused_adamw | adam | sgd")->capture_default_str();
  app.add_option("--lr", opt_options.lr, "peak learning rate")->capture_default_str();
  app.add_option("--clip", clip, "gradient clipping norm (0 = off)")->capture_default_str();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  std::string plugin = "ddp";
  app.add_option("--plugin", plugin, "ddp | zero | zero1 | zero2 | gemini (= zero3) | hybrid")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    dist::init();
    int n = dist::world_size(), r = dist::rank();
    COLOSSAL_CHECK(batch % (n * grad_accum) == 0, "--batch_size ", batch,
                   " must divide by ranks (", n, ") x --grad_accum (", grad_accum, ")");

    torch::manual_seed(seed);
    ToyMLP model(hidden);
    auto optimizer = optim::make_optimizer(*model, opt_options);
    auto scheduler = std::make_shared<optim::LRScheduler>(
        *optimizer, optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = steps / 10,
                                                .total_steps = steps, .min_lr_ratio = 0.1});

    booster::Booster booster(booster::make_plugin(plugin, precision));  // the one line that changes
    auto b = booster.boost(model.ptr(), optimizer, scheduler);

    // Synthetic task: y = sin(sum(x * w)) for a fixed random w.
    torch::manual_seed(seed + 1);
    auto w = torch::randn({32, 1}) / 4;
    auto data_gen = torch::make_generator<at::CPUGeneratorImpl>(seed + 2 + r);
    const int local = batch / n, micro = local / grad_accum;
    auto t0 = std::chrono::steady_clock::now();
    for (int step = 1; step <= steps; ++step) {
      b.optimizer->zero_grad();
      double step_loss = 0;
      for (int m = 0; m < grad_accum; ++m) {
        auto x = at::randn({micro, 32}, data_gen);
        auto y = torch::sin(x.matmul(w));
        auto run = [&] {
          auto pred = model->forward(x.to(b.compute_dtype)).to(torch::kFloat32);
          auto loss = torch::mse_loss(pred, y) / grad_accum;
          booster.backward(loss, *b.optimizer);
          step_loss += loss.item<double>();
        };
        // ZeRO-3 keeps no full gradients: its micro-batches each reduce-scatter and add.
        if (m + 1 < grad_accum && booster.plugin().supports_no_sync()) booster.no_sync(*b.optimizer, run);
        else run();
      }
      double norm = clip > 0 ? booster.clip_grad_norm(*b.optimizer, clip) : 0;
      b.optimizer->step();
      b.lr_scheduler->step();
      if (step % 20 == 0 || step == steps) {
        auto l = torch::tensor({step_loss}, torch::kFloat64);
        dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r == 0) {
          std::printf("step %4d/%d  loss %.5f  grad_norm %.3f  lr %.2e  %.0f samples/s\n", step,
                      steps, l.item<double>(), norm, b.lr_scheduler->lr(), step * batch / s);
          std::fflush(stdout);
        }
      }
    }
    auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, b.optimizer->inner());
    if (r == 0) std::printf("model-state memory on rank 0 (%s):\n%s", plugin.c_str(), report.format().c_str());
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_toy: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
