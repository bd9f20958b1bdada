#include "core/optim/fused_adamw.h"

#include <ATen/Parallel.h>
#include <torch/torch.h>

#include "core/common/check.h"
#include "kernels/cpu/adamw.h"

namespace colossal::optim {
namespace {

namespace kc = colossal::kernels::cpu;

// Work per thread: small tensors run inline; large ones are split in cache-friendly chunks.
constexpr int64_t kGrain = 1 << 15;

kc::AdamWStep to_step(const torch::optim::AdamWOptions& o, int64_t step) {
  kc::AdamWStep s;
  s.lr = o.lr();
  s.beta1 = std::get<0>(o.betas());
  s.beta2 = std::get<1>(o.betas());
  s.eps = o.eps();
  s.weight_decay = o.weight_decay();
  s.step = step;
  return s;
}

void check_tensor(const torch::Tensor& t, torch::ScalarType dtype, const char* what) {
  COLOSSAL_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == dtype,
                 "[fused_adamw] ", what, ": expected a contiguous CPU ", dtype, " tensor, got ",
                 t.scalar_type(), t.is_contiguous() ? "" : " (non-contiguous)", " on ",
                 t.device());
}

}  // namespace

void fused_adamw_update(torch::Tensor& master, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                        const torch::Tensor& grad, torch::Tensor working,
                        const torch::optim::AdamWOptions& options, int64_t step) {
  COLOSSAL_CHECK(!options.amsgrad(), "[fused_adamw] amsgrad is not supported");
  check_tensor(master, torch::kFloat32, "parameter");
  check_tensor(exp_avg, torch::kFloat32, "exp_avg");
  check_tensor(exp_avg_sq, torch::kFloat32, "exp_avg_sq");
  const int64_t n = master.numel();
  COLOSSAL_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n,
                 "[fused_adamw] sizes differ: parameter ", n, ", grad ", grad.numel());
  auto s = to_step(options, step);
  float* p = master.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  if (!working.defined()) {
    check_tensor(grad, torch::kFloat32, "grad");
    const float* g = grad.data_ptr<float>();
    at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
      kc::adamw_fp32(p + begin, m + begin, v + begin, g + begin, end - begin, s);
    });
    return;
  }
  check_tensor(grad, torch::kBFloat16, "grad (bf16 working parameters)");
  check_tensor(working, torch::kBFloat16, "working parameter");
  COLOSSAL_CHECK(working.numel() == n, "[fused_adamw] working parameter has ", working.numel(),
                 " elements, master ", n);
  auto* g = reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>());
  auto* w = reinterpret_cast<uint16_t*>(working.data_ptr<at::BFloat16>());
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    kc::adamw_bf16_master(p + begin, m + begin, v + begin, g + begin, w + begin, end - begin, s);
  });
}

FusedAdamW::FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                       torch::optim::AdamWOptions defaults)
    : torch::optim::Optimizer(std::move(groups),
                              std::make_unique<torch::optim::AdamWOptions>(defaults)) {
  COLOSSAL_CHECK(!defaults.amsgrad(), "[fused_adamw] amsgrad is not supported");
}

FusedAdamW::FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults)
    : FusedAdamW({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto key = p.unsafeGetTensorImpl();
      auto it = state_.find(key);
      if (it == state_.end()) {
        auto st = std::make_unique<torch::optim::AdamWParamState>();
        st->step(0);
        st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
        st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Contiguous));
        it = state_.emplace(key, std::move(st)).first;
      }
      auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
      st.step(st.step() + 1);
      auto param = p.detach();
      auto exp_avg = st.exp_avg();
      auto exp_avg_sq = st.exp_avg_sq();
      fused_adamw_update(param, exp_avg, exp_avg_sq, p.grad().contiguous(), torch::Tensor(),
                         options, st.step());
    }
  }
  return loss;
}

}  // namespace colossal::optim
