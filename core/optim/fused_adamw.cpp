#include "core/optim/fused_adamw.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>

#include "core/common/check.h"
#include "core/cuda/ops.h"
#include "kernels/cpu/adamw.h"
#include "kernels/cuda/adamw.h"

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

// Every tensor of one update lives where its parameter does: the CPU, or one CUDA device.
void check_tensor(const torch::Tensor& t, torch::ScalarType dtype, const char* what,
                  const c10::Device& device = c10::kCPU) {
  COLOSSAL_CHECK(t.device() == device && t.is_contiguous() && t.scalar_type() == dtype,
                 "[fused_adamw] ", what, ": expected a contiguous ", dtype, " tensor on ", device, ", got ",
                 t.scalar_type(), t.is_contiguous() ? "" : " (non-contiguous)", " on ",
                 t.device());
}

// The CUDA side of a step: one table entry per parameter, one launch per device.
namespace kg = colossal::kernels::cuda;
using CudaUpdates = std::map<c10::DeviceIndex, std::vector<kg::AdamWTensor>>;

kg::AdamWTensor cuda_entry(torch::Tensor& param, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                           const torch::Tensor& grad, const torch::Tensor& working, const kc::AdamWStep& step) {
  const auto device = param.device();
  check_tensor(param, torch::kFloat32, "parameter", device);
  check_tensor(exp_avg, torch::kFloat32, "exp_avg", device);
  check_tensor(exp_avg_sq, torch::kFloat32, "exp_avg_sq", device);
  kg::AdamWTensor e;
  e.param = param.data_ptr<float>();
  e.exp_avg = exp_avg.data_ptr<float>();
  e.exp_avg_sq = exp_avg_sq.data_ptr<float>();
  e.size = param.numel();
  e.c = kc::detail::coefficients(step);
  if (grad.scalar_type() == torch::kBFloat16) {
    check_tensor(grad, torch::kBFloat16, "grad (bf16 working parameters)", device);
    e.grad_bf16 = 1;
  } else {
    check_tensor(grad, torch::kFloat32, "grad", device);
  }
  e.grad = grad.const_data_ptr();
  if (working.defined()) {
    check_tensor(working, torch::kBFloat16, "working parameter", device);
    COLOSSAL_CHECK(working.numel() == e.size, "[fused_adamw] working parameter has ", working.numel(),
                   " elements, master ", e.size);
    e.working = reinterpret_cast<uint16_t*>(working.data_ptr<at::BFloat16>());
  }
  return e;
}

void run_on_gpus(CudaUpdates& updates) {
  RECORD_FUNCTION("colossal::fused_adamw_cuda", {});
  for (auto& [index, table] : updates) cuda::adamw_multi_tensor(std::move(table), {c10::kCUDA, index});
}

// One parameter's share of a step: raw pointers and the step's coefficients.
struct Update {
  float* param;
  float* exp_avg;
  float* exp_avg_sq;
  const float* grad = nullptr;        // fp32 gradient, or
  const uint16_t* grad_bf16 = nullptr;  // bf16 gradient with
  uint16_t* working = nullptr;        // the bf16 working copy to rewrite
  int64_t size;
  kc::AdamWStep step;

  void run(int64_t begin, int64_t end) const {
    if (grad)
      kc::adamw_fp32(param + begin, exp_avg + begin, exp_avg_sq + begin, grad + begin, end - begin, step);
    else
      kc::adamw_bf16_master(param + begin, exp_avg + begin, exp_avg_sq + begin, grad_bf16 + begin,
                            working + begin, end - begin, step);
  }
};

// All updates as one range of elements: each thread takes an equal slice of it (one fork-join
// per step, however many tensors).
void run_in_parallel(const std::vector<Update>& updates) {
  RECORD_FUNCTION("colossal::fused_adamw", {});  // named in profiler traces
  std::vector<int64_t> offset(updates.size() + 1, 0);
  for (size_t i = 0; i < updates.size(); ++i) offset[i + 1] = offset[i] + updates[i].size;
  at::parallel_for(0, offset.back(), kGrain, [&](int64_t begin, int64_t end) {
    size_t i = std::upper_bound(offset.begin(), offset.end(), begin) - offset.begin() - 1;
    for (; i < updates.size() && offset[i] < end; ++i) {
      const int64_t lo = std::max(begin, offset[i]) - offset[i], hi = std::min(end, offset[i + 1]) - offset[i];
      if (hi > lo) updates[i].run(lo, hi);
    }
  });
}

}  // namespace

void fused_adamw_update(torch::Tensor& master, torch::Tensor& exp_avg, torch::Tensor& exp_avg_sq,
                        const torch::Tensor& grad, torch::Tensor working,
                        const torch::optim::AdamWOptions& options, int64_t step) {
  COLOSSAL_CHECK(!options.amsgrad(), "[fused_adamw] amsgrad is not supported");
  if (master.is_cuda()) {
    COLOSSAL_CHECK(grad.numel() == master.numel(), "[fused_adamw] sizes differ: parameter ", master.numel(), ", grad ",
                   grad.numel());
    COLOSSAL_CHECK(working.defined() || grad.scalar_type() == torch::kFloat32,
                   "[fused_adamw] a bf16 gradient needs its bf16 working parameter");
    CudaUpdates updates;
    updates[master.device().index()].push_back(
        cuda_entry(master, exp_avg, exp_avg_sq, grad, working, to_step(options, step)));
    run_on_gpus(updates);
    return;
  }
  check_tensor(master, torch::kFloat32, "parameter");
  check_tensor(exp_avg, torch::kFloat32, "exp_avg");
  check_tensor(exp_avg_sq, torch::kFloat32, "exp_avg_sq");
  const int64_t n = master.numel();
  COLOSSAL_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n,
                 "[fused_adamw] sizes differ: parameter ", n, ", grad ", grad.numel());
  Update u{.param = master.data_ptr<float>(),
           .exp_avg = exp_avg.data_ptr<float>(),
           .exp_avg_sq = exp_avg_sq.data_ptr<float>(),
           .size = n,
           .step = to_step(options, step)};
  if (!working.defined()) {
    check_tensor(grad, torch::kFloat32, "grad");
    u.grad = grad.data_ptr<float>();
  } else {
    check_tensor(grad, torch::kBFloat16, "grad (bf16 working parameters)");
    check_tensor(working, torch::kBFloat16, "working parameter");
    COLOSSAL_CHECK(working.numel() == n, "[fused_adamw] working parameter has ", working.numel(),
                   " elements, master ", n);
    u.grad_bf16 = reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>());
    u.working = reinterpret_cast<uint16_t*>(working.data_ptr<at::BFloat16>());
  }
  run_in_parallel({u});
}

FusedAdamW::FusedAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                       torch::optim::AdamWOptions defaults)
    : torch::optim::Optimizer(std::move(groups),
                              std::make_unique<torch::optim::AdamWOptions>(defaults)) {
  COLOSSAL_CHECK(!defaults.amsgrad(), "[fused_adamw] amsgrad is not supported");
}

FusedAdamW::FusedAdamW(std::vector<torch::Tensor> params, torch::optim::AdamWOptions defaults)
    : FusedAdamW({torch::optim::OptimizerParamGroup(std::move(params))}, defaults) {}

void FusedAdamW::set_working_copy(const torch::Tensor& master, torch::Tensor working) {
  check_tensor(working, torch::kBFloat16, "working copy", master.device());
  COLOSSAL_CHECK(master.scalar_type() == torch::kFloat32 && working.numel() == master.numel(),
                 "[fused_adamw] a working copy needs an fp32 master of its size: master ", master.scalar_type(),
                 " with ", master.numel(), " elements, working copy ", working.numel());
  working_[master.unsafeGetTensorImpl()] = {std::move(working), false};
}

bool FusedAdamW::wrote_working_copy(const torch::Tensor& master) const {
  auto it = working_.find(master.unsafeGetTensorImpl());
  return it != working_.end() && it->second.written;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure) {
    torch::AutoGradMode enable(true);
    loss = closure();
  }
  std::vector<Update> updates;
  CudaUpdates gpu_updates;
  std::vector<torch::Tensor> keep_alive;  // contiguous copies of non-contiguous gradients
  for (auto& [key, w] : working_) w.written = false;
  for (auto& group : param_groups_) {
    auto& options = static_cast<torch::optim::AdamWOptions&>(group.options());
    COLOSSAL_CHECK(!options.amsgrad(), "[fused_adamw] amsgrad is not supported");
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
      auto grad = p.grad().contiguous();
      if (!p.grad().is_contiguous()) keep_alive.push_back(grad);
      COLOSSAL_CHECK(grad.numel() == p.numel(), "[fused_adamw] gradient has ", grad.numel(), " elements, parameter ",
                     p.numel());
      torch::Tensor working;  // a bf16 gradient: the working copy the update rewrites
      if (grad.scalar_type() == torch::kBFloat16) {
        auto w = working_.find(key);
        COLOSSAL_CHECK(w != working_.end(), "[fused_adamw] a bf16 gradient on an fp32 parameter needs its working "
                       "copy (set_working_copy)");
        working = w->second.tensor;
        w->second.written = true;
      }
      const auto this_step = to_step(options, st.step());
      if (p.is_cuda()) {
        gpu_updates[p.device().index()].push_back(
            cuda_entry(p, st.exp_avg(), st.exp_avg_sq(), grad, working, this_step));
        continue;
      }
      check_tensor(p, torch::kFloat32, "parameter");
      Update u{.param = p.data_ptr<float>(),
               .exp_avg = st.exp_avg().data_ptr<float>(),
               .exp_avg_sq = st.exp_avg_sq().data_ptr<float>(),
               .size = p.numel(),
               .step = this_step};
      if (working.defined()) {
        u.grad_bf16 = reinterpret_cast<const uint16_t*>(grad.data_ptr<at::BFloat16>());
        u.working = reinterpret_cast<uint16_t*>(working.data_ptr<at::BFloat16>());
      } else {
        check_tensor(grad, torch::kFloat32, "grad");
        u.grad = grad.data_ptr<float>();
      }
      updates.push_back(u);
    }
  }
  if (!updates.empty()) run_in_parallel(updates);
  run_on_gpus(gpu_updates);  // keep_alive holds the copied gradients until the launch is queued
  return loss;
}

}  // namespace colossal::optim
