// Optimizer step time: FusedAdamW (kernels/cpu, multi-threaded; one row per implementation the
// CPU runs) versus torch::optim::AdamW and versus torch's own fused kernel (at::_fused_adamw_, what
// torch.optim.AdamW(fused=True) runs) on the same sizes, alternating in one run; and the bf16-working/fp32-master variant versus the
// plain LibTorch way of doing the same (AdamW on the fp32 master, then copy to bf16).
//   build/apps/bench_optim [--params 100000000] [--tensors 100] [--reps 5]
// One JSON line per comparison.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>

#include "apps/bench/bench_util.h"
#include "core/common/check.h"
#include "core/optim/fused_adamw.h"
#include "kernels/cpu/adamw.h"

using colossal::bench::median;
using colossal::bench::seconds;

namespace {

std::vector<torch::Tensor> make_params(int64_t total, int64_t count, torch::ScalarType dtype) {
  std::vector<torch::Tensor> ps;
  int64_t each = total / count;
  for (int64_t i = 0; i < count; ++i) {
    auto p = torch::randn({each}).to(dtype).requires_grad_(true);
    p.mutable_grad() = torch::randn({each}).to(dtype);
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    int64_t total = 100'000'000, count = 100;
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
      if (!std::strcmp(argv[i], "--params")) total = std::stoll(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--tensors")) count = std::stoll(argv[i + 1]);
      else if (!std::strcmp(argv[i], "--reps")) reps = std::stoi(argv[i + 1]);
      else COLOSSAL_FAIL("unknown option '", argv[i], "' (expected --params, --tensors, --reps)");
    }
    auto opts = torch::optim::AdamWOptions(1e-3).weight_decay(0.01);
    int threads = at::get_num_threads();

    {  // fp32: plain LibTorch AdamW, torch's fused kernel (torch.optim.AdamW(fused=True)), ours
      auto a = make_params(total, count, torch::kFloat32);
      auto b = make_params(total, count, torch::kFloat32);
      auto c = make_params(total, count, torch::kFloat32);
      colossal::optim::FusedAdamW fused(a, opts);
      torch::optim::AdamW plain(b, opts);
      std::vector<torch::Tensor> tp_grads, tm, tv, tsteps;
      for (auto& t : c) {
        tp_grads.push_back(t.grad());
        tm.push_back(torch::zeros_like(t));
        tv.push_back(torch::zeros_like(t));
        tsteps.push_back(torch::zeros({}, torch::kFloat32));
      }
      auto torch_fused = [&] {
        torch::NoGradGuard ng;
        for (auto& st : tsteps) st.add_(1);
        at::_fused_adamw_(c, tp_grads, tm, tv, {}, tsteps, opts.lr(), std::get<0>(opts.betas()),
                          std::get<1>(opts.betas()), opts.weight_decay(), opts.eps(), false, false, {}, {});
      };
      fused.step();  // allocate state outside the timing
      plain.step();
      torch_fused();
      std::vector<double> tp, tt;
      std::map<std::string, std::vector<double>> tf;
      const auto impls = colossal::kernels::cpu::adamw_implementations();
      for (int r = 0; r < reps; ++r) {
        tp.push_back(seconds([&] { plain.step(); }));
        tt.push_back(seconds(torch_fused));
        for (const auto& impl : impls) {
          auto previous = colossal::kernels::cpu::adamw_use(impl);
          tf[impl].push_back(seconds([&] { fused.step(); }));
          colossal::kernels::cpu::adamw_use(previous);
        }
      }
      for (const auto& impl : impls) {
        std::printf(
            "{\"bench\":\"adamw_step\",\"dtype\":\"fp32\",\"params\":%lld,\"tensors\":%lld,"
            "\"threads\":%d,\"kernel\":\"%s\",\"torch_adamw_ms\":%.1f,\"torch_fused_adamw_ms\":%.1f,"
            "\"fused_adamw_ms\":%.1f,\"vs_torch_fused\":%.2f}\n",
            static_cast<long long>(total), static_cast<long long>(count), threads, impl.c_str(),
            median(tp) * 1e3, median(tt) * 1e3, median(tf[impl]) * 1e3, median(tt) / median(tf[impl]));
      }
      std::fflush(stdout);
    }
    {  // bf16 working parameters, fp32 master and moments
      int64_t each = total / count;
      std::vector<torch::Tensor> working, master, m, v, grads;
      for (int64_t i = 0; i < count; ++i) {
        master.push_back(torch::randn({each}));
        working.push_back(master.back().to(torch::kBFloat16));
        m.push_back(torch::zeros({each}));
        v.push_back(torch::zeros({each}));
        grads.push_back(torch::randn({each}).to(torch::kBFloat16));
      }
      // Plain LibTorch: fp32 master params with fp32 grads, AdamW, then copy back to bf16.
      std::vector<torch::Tensor> ref_master;
      for (auto& t : master) ref_master.push_back(t.clone().requires_grad_(true));
      torch::optim::AdamW plain(ref_master, opts);
      auto plain_step = [&] {
        for (int64_t i = 0; i < count; ++i) ref_master[i].mutable_grad() = grads[i].to(torch::kFloat32);
        plain.step();
        torch::NoGradGuard ng;
        for (int64_t i = 0; i < count; ++i) working[i].copy_(ref_master[i]);
      };
      int64_t step = 0;
      auto fused_step = [&] {
        ++step;
        for (int64_t i = 0; i < count; ++i)
          colossal::optim::fused_adamw_update(master[i], m[i], v[i], grads[i], working[i], opts, step);
      };
      plain_step();
      fused_step();
      std::vector<double> tf, tp;
      for (int r = 0; r < reps; ++r) {
        tp.push_back(seconds(plain_step));
        tf.push_back(seconds(fused_step));
      }
      std::printf(
          "{\"bench\":\"adamw_step\",\"dtype\":\"bf16_working_fp32_master\",\"params\":%lld,"
          "\"threads\":%d,\"torch_adamw_plus_copy_ms\":%.1f,\"fused_adamw_ms\":%.1f,"
          "\"speedup\":%.2f}\n",
          static_cast<long long>(total), threads, median(tp) * 1e3, median(tf) * 1e3,
          median(tp) / median(tf));
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optim: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
