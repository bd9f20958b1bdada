#include "core/amp/mixed_precision.h"

#include <torch/torch.h>

#include <map>

#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"

namespace colossal::amp {

MixedPrecision::MixedPrecision(Precision precision, const c10::Device& device,
                               DynamicLossScaler::Options scaler_options)
    : precision_(precision), compute_dtype_(amp::compute_dtype(precision, device)) {
  if (precision == Precision::kFp16) scaler_.emplace(scaler_options);
  if (precision != Precision::kFp32 && compute_dtype_ == c10::kFloat) {
    COLOSSAL_LOG_WARN("[amp] ", precision_name(precision), " requested but this CPU has no native ",
                      precision_name(precision), " matrix units (or COLOSSAL_CPU_COMPUTE=fp32): ",
                      "computing in fp32", precision == Precision::kFp16 ? " with loss scaling" : "");
  }
}

void MixedPrecision::wrap(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    index_of_[p.unsafeGetTensorImpl()] = working_.size();
    working_.push_back(p);
  }
  masters_.resize(working_.size());
  if (compute_dtype_ == c10::kFloat) return;
  has_masters_ = true;
  std::map<const void*, torch::Tensor> master_of;
  for (size_t i = 0; i < working_.size(); ++i) {
    auto& p = working_[i];
    if (!p.is_floating_point()) continue;
    COLOSSAL_CHECK(p.scalar_type() == c10::kFloat, "[amp] mixed precision expects an fp32 model to ",
                   "start from; found a ", p.scalar_type(), " parameter");
    auto master = p.detach().clone().requires_grad_(p.requires_grad());
    master_of[p.unsafeGetTensorImpl()] = master;
    masters_[i] = master;
    p.set_data(p.detach().to(compute_dtype_));
  }
  for (auto& b : model.buffers()) {
    if (b.is_floating_point()) b.set_data(b.detach().to(compute_dtype_));
  }
  // The optimizer now updates the masters.
  COLOSSAL_CHECK(optimizer.state().empty(), "[amp] boost a fresh optimizer (it already has state)");
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto it = master_of.find(p.unsafeGetTensorImpl());
      if (it != master_of.end()) p = it->second;
    }
  }
}

torch::Tensor MixedPrecision::master_of(const torch::Tensor& p) const {
  auto it = index_of_.find(p.unsafeGetTensorImpl());
  if (it != index_of_.end() && masters_[it->second].defined()) return masters_[it->second];
  return p;
}

void MixedPrecision::refresh_working_from_masters() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < working_.size(); ++i)
    if (masters_[i].defined()) working_[i].detach().copy_(masters_[i]);
}

void MixedPrecision::prepare_grads(const dist::Group& group) {
  torch::NoGradGuard no_grad;
  double inv_scale = 1.0 / loss_scale();
  // Gradients into fp32 (the masters', or in place for fp32 params), unscaled.
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < working_.size(); ++i) {
    const auto& g = working_[i].grad();
    if (!g.defined()) continue;
    if (masters_[i].defined()) {
      masters_[i].mutable_grad() = g.to(torch::kFloat32).mul_(inv_scale);
      grads.push_back(masters_[i].grad());
    } else {
      if (inv_scale != 1.0) g.mul_(inv_scale);
      grads.push_back(g);
    }
  }
  overflow_ = false;
  if (scaler_) {
    // One flag per rank, agreed on by all: any inf/nan anywhere skips the step everywhere.
    bool local = false;
    for (const auto& g : grads) local |= !torch::isfinite(g).all().item<bool>();
    auto flag = torch::tensor({local ? 1.0f : 0.0f});
    if (group.is_member() && group.size() > 1) dist::all_reduce(flag, group, dist::ReduceOp::kMax);
    overflow_ = flag.item<float>() > 0;
  }
}

bool MixedPrecision::step(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  if (scaler_) scaler_->update(overflow_);
  if (overflow_) {
    ++skipped_steps_;
    COLOSSAL_LOG_INFO("[amp] gradient overflow: step skipped, loss scale now ", loss_scale());
    return false;
  }
  optimizer.step();
  if (has_masters_) {
    for (size_t i = 0; i < working_.size(); ++i) {
      if (!masters_[i].defined()) continue;
      working_[i].detach().copy_(masters_[i]);
      masters_[i].mutable_grad() = torch::Tensor();  // fp32 gradients live only for the step
    }
  }
  return true;
}

}  // namespace colossal::amp
