// DDP training throughput on a stack of transformer blocks, side by side in one run:
//   plain      LibTorch loop: backward, then all-reduce each gradient (c10d, one call per tensor)
//   ddp_fp32   Booster + DDPPlugin: bucketed all-reduce overlapping backward
//   ddp_bf16   the same with bf16 working params/grads/communication, fp32 masters
// Steps alternate between the three so machine noise hits all alike; medians are reported, with
// the tensor memory each keeps (parameters, gradients, masters, optimizer moments).
//   colossal run --nproc_per_node 2 -- build/apps/bench_ddp [--layers 4] [--steps 10]
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "apps/bench/bench_util.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;

using colossal::bench::median;
using colossal::bench::seconds;

namespace {

struct Config {
  int layers = 4, d_model = 256, heads = 4, ffn = 1024, seq = 64, batch = 8, steps = 10;
};

torch::nn::Sequential make_model(const Config& c) {
  torch::manual_seed(0);
  torch::nn::Sequential s;
  for (int i = 0; i < c.layers; ++i) {
    s->push_back(torch::nn::TransformerEncoderLayer(
        torch::nn::TransformerEncoderLayerOptions(c.d_model, c.heads).dim_feedforward(c.ffn).dropout(0.0)));
  }
  return s;
}

int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; }

// Parameters + gradients of the model, plus whatever the optimizer holds (masters and moments).
int64_t training_bytes(torch::nn::Module& model, torch::optim::Optimizer& opt) {
  int64_t total = 0;
  for (auto& p : model.parameters()) total += bytes_of(p) + bytes_of(p.grad());
  for (auto& g : opt.param_groups()) {
    for (auto& p : g.params()) {
      bool is_model_param = false;
      for (auto& q : model.parameters()) is_model_param |= q.is_same(p);
      if (!is_model_param) total += bytes_of(p) + bytes_of(p.grad());  // fp32 masters
      auto it = opt.state().find(p.unsafeGetTensorImpl());
      if (it == opt.state().end()) continue;
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      total += bytes_of(st.exp_avg()) + bytes_of(st.exp_avg_sq());
    }
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Config c;
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string a = argv[i];
      int v = std::stoi(argv[i + 1]);
      if (a == "--layers") c.layers = v;
      else if (a == "--steps") c.steps = v;
      else if (a == "--batch") c.batch = v;
      else if (a == "--seq") c.seq = v;
      else COLOSSAL_FAIL("unknown option '", a, "' (expected --layers, --steps, --batch, --seq)");
    }
    dist::init();
    auto world = dist::world_group();
    int n = dist::world_size();

    // plain: the usual hand-written data-parallel loop.
    auto plain = make_model(c);
    torch::optim::AdamW plain_opt(plain->parameters(), torch::optim::AdamWOptions(1e-4));
    auto backend = world.backend();

    struct Boosted {
      torch::nn::Sequential model;
      std::unique_ptr<booster::Booster> booster;
      booster::Boosted b;
    };
    auto make_boosted = [&](const std::string& precision) {
      Boosted x;
      x.model = make_model(c);
      auto opt = std::make_shared<torch::optim::AdamW>(x.model->parameters(),
                                                       torch::optim::AdamWOptions(1e-4));
      x.booster = std::make_unique<booster::Booster>(booster::make_plugin("ddp", precision));
      x.b = x.booster->boost(x.model.ptr(), opt);
      return x;
    };
    Boosted fp32 = make_boosted("fp32");
    Boosted bf16 = make_boosted("bf16");

    torch::manual_seed(1 + dist::rank());
    auto input = torch::randn({c.seq, c.batch, c.d_model});

    auto plain_step = [&] {
      plain_opt.zero_grad();
      auto loss = plain->forward(input).pow(2).mean();
      loss.backward();
      for (auto& p : plain->parameters()) {
        std::vector<at::Tensor> ts{p.grad()};
        backend->allreduce(ts)->wait();
        p.grad().div_(n);
      }
      plain_opt.step();
    };
    auto boosted_step = [&](Boosted& x) {
      x.b.optimizer->zero_grad();
      auto loss = x.model->forward(input.to(x.b.compute_dtype)).to(torch::kFloat32).pow(2).mean();
      x.booster->backward(loss, *x.b.optimizer);
      x.b.optimizer->step();
    };

    auto time_step = [&](const std::function<void()>& fn) {
      dist::barrier(world);
      auto t0 = std::chrono::steady_clock::now();
      fn();
      dist::barrier(world);
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    for (int i = 0; i < 2; ++i) {  // warm-up (allocations, optimizer state)
      plain_step();
      boosted_step(fp32);
      boosted_step(bf16);
    }
    std::vector<double> tp, tf, tb;
    for (int s = 0; s < c.steps; ++s) {
      tp.push_back(time_step(plain_step));
      tf.push_back(time_step([&] { boosted_step(fp32); }));
      tb.push_back(time_step([&] { boosted_step(bf16); }));
    }
    int64_t global = static_cast<int64_t>(c.batch) * n;
    if (dist::rank() == 0) {
      auto line = [&](const char* what, double s, int64_t bytes) {
        std::printf("{\"bench\":\"ddp_train\",\"variant\":\"%s\",\"ranks\":%d,\"layers\":%d,"
                    "\"d_model\":%d,\"seq\":%d,\"global_batch\":%lld,\"step_ms\":%.1f,"
                    "\"samples_per_s\":%.1f,\"speedup_vs_plain\":%.2f,\"training_tensor_MiB\":%.1f}\n",
                    what, n, c.layers, c.d_model, c.seq, static_cast<long long>(global), s * 1e3,
                    global / s, median(tp) / s, bytes / 1048576.0);
      };
      line("plain_allreduce_each_grad", median(tp), training_bytes(*plain, plain_opt));
      line("booster_ddp_fp32", median(tf), training_bytes(*fp32.model, fp32.b.optimizer->inner()));
      line("booster_ddp_bf16", median(tb), training_bytes(*bf16.model, bf16.b.optimizer->inner()));
    }
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ddp: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
