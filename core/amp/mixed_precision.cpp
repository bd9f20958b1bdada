#include "core/amp/mixed_precision.h"

#include <torch/torch.h>

#include <cmath>
#include <map>

#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"
#include "core/optim/fused_adamw.h"

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
  // bf16 without loss scaling and a FusedAdamW: the working gradients go to the optimizer as they
  // are, and its one pass updates the master and rewrites the working copy (see prepare_grads).
  fused_ = dynamic_cast<optim::FusedAdamW*>(&optimizer);
  if (fused_ != nullptr && (compute_dtype_ != c10::kBFloat16 || scaler_)) fused_ = nullptr;
  if (fused_ != nullptr) {
    for (size_t i = 0; i < working_.size(); ++i)
      if (masters_[i].defined()) fused_->set_working_copy(masters_[i], working_[i].detach());
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
    if (masters_[i].defined() && fused_ != nullptr) {
      // Handed over as it is (bf16, scale 1): FusedAdamW reads it in its update pass.
      masters_[i].mutable_grad() = g;
      grads.push_back(g);
    } else if (masters_[i].defined()) {
      masters_[i].mutable_grad() = g.to(torch::kFloat32);
      if (inv_scale != 1.0) masters_[i].mutable_grad().mul_(inv_scale);
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

void MixedPrecision::scale_master_grad(torch::Tensor& master, float coef) {
  auto& g = master.mutable_grad();
  if (!g.defined() || coef == 1.0f) return;  // x * 1 is x: nothing to do
  // A handed-over bf16 gradient becomes the fp32 one the unfused path would have scaled.
  if (g.scalar_type() != master.scalar_type()) g = g.to(master.scalar_type());
  g.mul_(coef);
}

double MixedPrecision::clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      if (p.grad().defined()) params.push_back(p);
  if (fused_ == nullptr || params.empty()) return torch::nn::utils::clip_grad_norm_(params, max_norm, norm_type);
  // torch::nn::utils::clip_grad_norm_'s arithmetic on the fp32 value of each gradient (a bf16
  // gradient is converted exactly, then reduced as the fp32 copy would be).
  std::vector<torch::Tensor> norms;
  const bool inf_norm = std::isinf(norm_type);
  COLOSSAL_CHECK(norm_type > 0, "[amp] clip_grad_norm: expected a norm type > 0, got ", norm_type);
  for (const auto& p : params) {
    auto g = p.grad().to(p.scalar_type());
    norms.push_back(inf_norm ? g.abs().max() : g.norm(norm_type));
  }
  auto total = norms.size() == 1 ? norms[0] : inf_norm ? torch::max(torch::stack(norms))
                                                       : torch::stack(norms).norm(norm_type);
  auto coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0).item<float>();
  for (auto& p : params) scale_master_grad(p, coef);
  return total.item<double>();
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
      // The fused update wrote the working copy unless clipping had made the gradient fp32.
      if (fused_ == nullptr || !fused_->wrote_working_copy(masters_[i])) working_[i].detach().copy_(masters_[i]);
      masters_[i].mutable_grad() = torch::Tensor();  // fp32 gradients live only for the step
    }
  }
  return true;
}

}  // namespace colossal::amp
