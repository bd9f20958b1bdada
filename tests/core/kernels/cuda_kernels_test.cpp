// kernels/cuda against their CPU references, through the tensor layer (core/cuda) and the
// autograd functions that use them (core/nn, core/optim): odd sizes (1, 7, 4097, 100003
// elements), head dims 64 and 128, block sizes 16 and 32, fp32 and bf16 (fp16 where the kernel
// has it), forward and backward. Labelled `cuda`: where no GPU is visible every test is reported
// as skipped, with the reason, never as passed.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/ops.h"
#include "tests/support/cuda.h"
#include "core/nn/fused_losses.h"
#include "core/nn/rms_norm.h"
#include "core/nn/rotary.h"
#include "core/nn/swiglu.h"
#include "core/optim/fused_adamw.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cpu/paged_attention.h"

namespace colossal {
namespace {

const c10::Device kGpu(c10::kCUDA, 0);

// |got - want| <= atol + rtol * |want| everywhere, reported with the worst element.
void expect_close(const torch::Tensor& got_in, const torch::Tensor& want_in, double rtol, double atol,
                  const std::string& what) {
  auto got = got_in.detach().to(torch::kCPU, torch::kDouble);
  auto want = want_in.detach().to(torch::kCPU, torch::kDouble);
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  auto excess = (got - want).abs() - (want.abs() * rtol + atol);
  auto worst = excess.flatten().argmax().item<int64_t>();
  EXPECT_LE(excess.flatten()[worst].item<double>(), 0.0)
      << what << ": element " << worst << " is " << got.flatten()[worst].item<double>() << ", expected "
      << want.flatten()[worst].item<double>() << " (rtol " << rtol << ", atol " << atol << ")";
}

double tolerance(torch::ScalarType t) { return t == torch::kFloat ? 1e-5 : 1.6e-2; }

const std::vector<torch::ScalarType> kTypes = {torch::kFloat, torch::kBFloat16};

TEST(CudaKernels, AdamWOneLaunchForManyTensorsGivesTheCpuBits) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(1);
  namespace kc = kernels::cpu;
  kc::AdamWStep step;
  step.lr = 3e-3;
  step.weight_decay = 0.1;
  step.step = 7;
  std::vector<int64_t> sizes = {1, 7, 4097, 100003};
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 gradients, working copies" : "fp32 gradients");
    std::vector<torch::Tensor> p, m, v, g, w;
    std::vector<kernels::cuda::AdamWTensor> table;
    for (auto n : sizes) {
      p.push_back(torch::randn({n}));
      m.push_back(torch::randn({n}) * 0.1);
      v.push_back(torch::rand({n}) * 0.01);
      g.push_back(bf16 ? torch::randn({n}).to(torch::kBFloat16) : torch::randn({n}));
      w.push_back(p.back().to(torch::kBFloat16));
    }
    std::vector<torch::Tensor> dp, dm, dv, dg, dw;
    for (size_t i = 0; i < sizes.size(); ++i) {
      dp.push_back(p[i].to(kGpu));
      dm.push_back(m[i].to(kGpu));
      dv.push_back(v[i].to(kGpu));
      dg.push_back(g[i].to(kGpu));
      dw.push_back(w[i].to(kGpu));
      kernels::cuda::AdamWTensor e;
      e.param = dp[i].data_ptr<float>();
      e.exp_avg = dm[i].data_ptr<float>();
      e.exp_avg_sq = dv[i].data_ptr<float>();
      e.grad = dg[i].const_data_ptr();
      e.grad_bf16 = bf16;
      e.working = bf16 ? reinterpret_cast<uint16_t*>(dw[i].data_ptr<at::BFloat16>()) : nullptr;
      e.size = sizes[i];
      e.c = kc::detail::coefficients(step);
      table.push_back(e);
    }
    cuda::adamw_multi_tensor(table, kGpu);
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (bf16)
        kc::adamw_bf16_master(p[i].data_ptr<float>(), m[i].data_ptr<float>(), v[i].data_ptr<float>(),
                              reinterpret_cast<const uint16_t*>(g[i].data_ptr<at::BFloat16>()),
                              reinterpret_cast<uint16_t*>(w[i].data_ptr<at::BFloat16>()), sizes[i], step);
      else
        kc::adamw_fp32(p[i].data_ptr<float>(), m[i].data_ptr<float>(), v[i].data_ptr<float>(), g[i].data_ptr<float>(),
                       sizes[i], step);
      SCOPED_TRACE(std::to_string(sizes[i]) + " elements");
      EXPECT_TRUE(torch::equal(dp[i].cpu(), p[i])) << "parameters differ from the CPU kernel's bits";
      EXPECT_TRUE(torch::equal(dm[i].cpu(), m[i]));
      EXPECT_TRUE(torch::equal(dv[i].cpu(), v[i]));
      if (bf16) EXPECT_TRUE(torch::equal(dw[i].cpu(), w[i])) << "working copy";
    }
  }
}

TEST(CudaKernels, FusedAdamWStepsOnTheGpuAsOnTheCpu) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(2);
  std::vector<torch::Tensor> cpu_params, gpu_params;
  for (int64_t n : {1, 7, 4097, 100003}) {
    cpu_params.push_back(torch::randn({n}).requires_grad_());
    gpu_params.push_back(cpu_params.back().detach().to(kGpu).requires_grad_());
  }
  auto options = torch::optim::AdamWOptions(1e-2).weight_decay(0.05);
  optim::FusedAdamW on_cpu(cpu_params, options), on_gpu(gpu_params, options);
  for (int s = 0; s < 3; ++s) {
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      auto g = torch::randn(cpu_params[i].sizes());
      cpu_params[i].mutable_grad() = g;
      gpu_params[i].mutable_grad() = g.to(kGpu);
    }
    on_cpu.step();
    on_gpu.step();
  }
  for (size_t i = 0; i < cpu_params.size(); ++i)
    EXPECT_TRUE(torch::equal(gpu_params[i].detach().cpu(), cpu_params[i].detach())) << "parameter " << i;
}

TEST(CudaKernels, RmsNormForwardAndBackwardFollowTheCpu) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(3);
  // rows x dim: 1, 7, 4097 and 100003 elements per row, and 100003 rows of 1.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{1, 1}, {5, 7}, {3, 4097}, {2, 100003}, {100003, 1}};
  for (auto dtype : kTypes) {
    for (auto [rows, dim] : shapes) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(rows) + "x" + std::to_string(dim));
      auto x = torch::randn({rows, dim}).to(dtype);
      auto w = (torch::rand({dim}) + 0.5).to(dtype);
      auto gy = torch::randn({rows, dim}).to(dtype);
      auto xc = x.clone().requires_grad_(), wc = w.clone().requires_grad_();
      auto yc = nn::rms_norm(xc, wc, 1e-6);
      yc.backward(gy);
      auto xg = x.to(kGpu).requires_grad_(), wg = w.to(kGpu).requires_grad_();
      auto yg = nn::rms_norm(xg, wg, 1e-6);
      yg.backward(gy.to(kGpu));
      const double tol = tolerance(dtype);
      expect_close(yg, yc, tol, tol, "y");
      expect_close(xg.grad(), xc.grad(), tol, tol * 4, "grad x");
      // The weight gradient sums over rows: its rounding grows with their number.
      expect_close(wg.grad(), wc.grad(), tol * 4, tol * std::sqrt(static_cast<double>(rows)), "grad weight");
    }
  }
}

TEST(CudaKernels, RotaryForwardAndBackwardFollowTheCpu) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(4);
  for (auto dtype : kTypes) {
    for (int64_t d : {64, 128}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " head dim " + std::to_string(d));
      const int64_t B = 2, T = 7, H = 3, P = 4097;
      auto angles = torch::outer(torch::arange(P, torch::kDouble), torch::rand({d / 2}, torch::kDouble));
      auto emb = torch::cat({angles, angles}, -1);
      auto cos = emb.cos().to(torch::kFloat), sin = emb.sin().to(torch::kFloat);
      auto positions = torch::tensor({0, 1, 2, 100, 4095, 4096, 3}, torch::kLong);
      auto x = torch::randn({B, T, H, d}).to(dtype);
      auto gy = torch::randn({B, T, H, d}).to(dtype);
      auto xc = x.clone().requires_grad_();
      auto yc = nn::apply_rotary(xc, cos, sin, positions);
      yc.backward(gy);
      auto xg = x.to(kGpu).requires_grad_();
      auto yg = nn::apply_rotary(xg, cos.to(kGpu), sin.to(kGpu), positions.to(kGpu));
      yg.backward(gy.to(kGpu));
      const double tol = tolerance(dtype);
      expect_close(yg, yc, tol, tol, "y");
      expect_close(xg.grad(), xc.grad(), tol, tol, "grad x");
    }
  }
}

TEST(CudaKernels, SwigluForwardAndBackwardFollowTheCpu) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(5);
  for (auto dtype : kTypes) {
    for (int64_t n : {1, 7, 4097, 100003}) {
      for (bool slices : {false, true}) {  // separate tensors, or the halves of one gate_up row
        SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + std::to_string(n) + (slices ? " (slices)" : ""));
        const int64_t rows = n >= 4097 ? 3 : 1;
        auto both = torch::randn({rows, 2 * n}).to(dtype) * 3;
        auto gy = torch::randn({rows, n}).to(dtype);
        auto run = [&](const c10::Device& device) {
          auto b = both.to(device).requires_grad_();
          auto gate = slices ? b.narrow(1, 0, n) : b.narrow(1, 0, n).contiguous();
          auto up = slices ? b.narrow(1, n, n) : b.narrow(1, n, n).contiguous();
          auto y = nn::swiglu(gate, up);
          y.backward(gy.to(device));
          return std::make_pair(y.detach(), b.grad());
        };
        auto [yc, gc] = run(c10::kCPU);
        auto [yg, gg] = run(kGpu);
        const double tol = tolerance(dtype);
        expect_close(yg, yc, tol, tol, "y");
        expect_close(gg, gc, tol * 2, tol * 2, "grad gate and up");
      }
    }
  }
}

TEST(CudaKernels, LinearCrossEntropyFollowsTheCpuOverLargeVocabularies) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(6);
  for (auto dtype : kTypes) {
    for (int64_t vocab : {7, 4097, 100003}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " vocabulary " + std::to_string(vocab));
      const int64_t n = 9, d = 64;
      auto hidden = torch::randn({n, d}).to(dtype);
      auto weight = (torch::randn({vocab, d}) * 0.2).to(dtype);
      auto target = torch::randint(0, vocab, {n}, torch::kLong);
      target[3] = -100;  // ignored
      auto run = [&](const c10::Device& device) {
        auto h = hidden.to(device).requires_grad_(), w = weight.to(device).requires_grad_();
        auto loss = nn::linear_cross_entropy(h, w, target.to(device), -100);
        (loss * 1.5).backward();
        return std::make_tuple(loss.detach(), h.grad(), w.grad());
      };
      auto [lc, hc, wc] = run(c10::kCPU);
      auto [lg, hg, wg] = run(kGpu);
      const double tol = dtype == torch::kFloat ? 1e-5 : 2e-2;
      expect_close(lg, lc, tol, tol, "loss");
      expect_close(hg, hc, tol, tol * 0.1, "grad hidden");
      expect_close(wg, wc, tol, tol * 0.1, "grad weight");
    }
  }
}

// The paged kernel against the CPU's (fp32 and bf16 caches) and float64 (fp16 caches): GQA,
// head dims 64 and 128, block sizes 16 and 32, contexts crossing blocks, and contexts past
// kSplitPositions (split over blocks and merged: flash decoding) beside short ones.
TEST(CudaKernels, PagedAttentionFollowsTheCpuKernel) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  torch::manual_seed(7);
  for (auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
    for (int64_t d : {64, 128}) {
      for (int64_t bs : {16, 32}) {
        for (auto [heads, kv] : std::vector<std::pair<int64_t, int64_t>>{{8, 2}, {4, 4}, {12, 1}}) {
          SCOPED_TRACE(std::string(c10::toString(dtype)) + " d " + std::to_string(d) + " block " +
                       std::to_string(bs) + " heads " + std::to_string(heads) + "/" + std::to_string(kv));
          const int64_t blocks = 96, max_blocks = 40;
          std::vector<int32_t> context = {1, 7, 100, 33, 16 * 12, 1100, 513};  // one token per sequence
          const auto tokens = static_cast<int64_t>(context.size());
          for (auto& c : context) c = std::min<int32_t>(c, static_cast<int32_t>(bs * max_blocks));
          auto k = torch::randn({blocks, bs, kv, d}).to(dtype);
          auto v = torch::randn({blocks, bs, kv, d}).to(dtype);
          auto tables = torch::randperm(blocks, torch::kInt).narrow(0, 0, max_blocks).repeat({tokens, 1}).contiguous();
          for (int64_t t = 0; t < tokens; ++t) tables[t] = tables[t].roll(t);  // each sequence its own order
          tables = tables.contiguous();
          auto seq = torch::arange(tokens, torch::kInt);
          auto ctx = torch::tensor(context, torch::kInt);
          auto q = torch::randn({tokens, heads, d}).to(dtype);
          const double scale = 1.0 / std::sqrt(static_cast<double>(d));
          auto out = torch::empty({tokens, heads, d}, q.options().device(kGpu));
          // The largest context given (as the engine does) for fp32, read from the device otherwise.
          const int64_t given = dtype == torch::kFloat ? *std::max_element(context.begin(), context.end()) : 0;
          cuda::paged_attention(q.to(kGpu), out, k.to(kGpu), v.to(kGpu), tables.to(kGpu), seq.to(kGpu), ctx.to(kGpu),
                                scale, given);
          torch::Tensor want;
          if (dtype != torch::kHalf) {
            auto qf = q.to(torch::kFloat).contiguous();
            want = torch::empty({tokens, heads, d});
            kernels::cpu::PagedAttentionArgs a;
            a.q = qf.data_ptr<float>();
            a.out = want.data_ptr<float>();
            a.k_cache = k.data_ptr();
            a.v_cache = v.data_ptr();
            a.bf16_cache = dtype == torch::kBFloat16;
            a.heads = heads;
            a.kv_heads = kv;
            a.head_dim = d;
            a.block_size = bs;
            a.block_tables = tables.data_ptr<int32_t>();
            a.max_blocks = max_blocks;
            a.token_seq = seq.data_ptr<int32_t>();
            a.token_context = ctx.data_ptr<int32_t>();
            a.scale = static_cast<float>(scale);
            a.tokens = tokens;
            kernels::cpu::paged_attention_portable(a, 0, tokens * heads);
          } else {
            want = torch::empty({tokens, heads, d}, torch::kDouble);
            for (int64_t t = 0; t < tokens; ++t) {
              auto slots = std::vector<int64_t>();
              for (int32_t j = 0; j < context[t]; ++j) slots.push_back(tables[t][j / bs].item<int64_t>() * bs + j % bs);
              auto idx = torch::tensor(slots, torch::kLong);
              auto ks = k.view({-1, kv, d}).index_select(0, idx).to(torch::kDouble);  // [ctx, kv, d]
              auto vs = v.view({-1, kv, d}).index_select(0, idx).to(torch::kDouble);
              for (int64_t h = 0; h < heads; ++h) {
                const int64_t g = h / (heads / kv);
                auto s = torch::mv(ks.select(1, g), q[t][h].to(torch::kDouble)) * scale;
                want[t][h] = torch::mv(vs.select(1, g).t(), torch::softmax(s, 0));
              }
            }
          }
          // The output is rounded to the cache dtype on the GPU (one rounding: its tolerance).
          const double tol = dtype == torch::kFloat ? 1e-5 : dtype == torch::kBFloat16 ? 1e-2 : 2e-3;
          expect_close(out, want, tol, tol, "attention output");
        }
      }
    }
  }
}

TEST(CudaKernels, BadOperandsAreRefusedByName) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  auto x = torch::randn({4, 8}, torch::TensorOptions().device(kGpu));
  std::string msg;
  try {
    cuda::rms_norm_forward(x, torch::ones({9}, x.options()), 1e-6);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("weight must be [8]"), std::string::npos) << msg;
  msg.clear();
  try {
    auto q = torch::randn({1, 2, 300}, x.options());
    auto cache = torch::randn({1, 16, 1, 300}, x.options());
    auto meta = torch::zeros({1, 1}, x.options().dtype(torch::kInt));
    auto out = torch::empty_like(q);
    cuda::paged_attention(q, out, cache, cache, meta, meta.view({1}), meta.view({1}) + 1, 1.0);
  } catch (const std::exception& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("head_dim 300 outside 1..256"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal
