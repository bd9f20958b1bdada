#include "core/zero/master_shards.h"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <map>

#include "core/common/check.h"
#include "core/amp/mixed_precision.h"
#include "core/dist/collectives.h"
#include "core/optim/fused_adamw.h"

namespace colossal::zero {

void MasterShards::bind(torch::optim::Optimizer& optimizer,
                        const std::function<int64_t(const torch::Tensor&)>& slice_of) {
  COLOSSAL_CHECK(optimizer.state().empty(),
                 "[zero] boost a fresh optimizer (this one already has state)");
  for (auto& group : optimizer.param_groups()) {
    std::vector<torch::Tensor> kept;
    for (auto& p : group.params()) {
      int64_t i = slice_of(p);
      if (i >= 0) kept.push_back(slices_[i].master);
    }
    group.params() = std::move(kept);
  }
}

void MasterShards::fuse_working_updates(torch::optim::Optimizer& optimizer) {
  fused_ = scaler_ ? nullptr : dynamic_cast<optim::FusedAdamW*>(&optimizer);
  if (fused_ == nullptr) return;
  for (auto& s : slices_)
    if (s.working.defined()) fused_->set_working_copy(s.master, s.working);
}

bool MasterShards::working_written(size_t i) const {
  return fused_ != nullptr && i < slices_.size() && fused_->wrote_working_copy(slices_[i].master);
}

void MasterShards::prepare_grads() {
  torch::NoGradGuard no_grad;
  double inv_scale = 1.0 / loss_scale();
  bool local_overflow = false;
  for (auto& s : slices_) {
    COLOSSAL_CHECK(s.grad.defined() && s.grad.numel() == s.master.numel(),
                   "[zero] no reduced gradient for the slice of '", s.name, "'");
    bool same = s.grad.scalar_type() == s.master.scalar_type() &&
                s.grad.device() == s.master.device();
    const bool handed_over = fused_ != nullptr && s.working.defined() && s.grad.scalar_type() == torch::kBFloat16 &&
                             s.grad.device() == s.master.device() && inv_scale == 1.0;
    if ((same && inv_scale == 1.0) || handed_over) {
      s.master.mutable_grad() = s.grad;  // a view: no copy (bf16 handed over: FusedAdamW reads it)
    } else {
      auto g = s.grad.to(s.master.device(), torch::kFloat32, /*non_blocking=*/false,
                         /*copy=*/true);
      if (inv_scale != 1.0) g.mul_(inv_scale);
      s.master.mutable_grad() = g;
    }
    if (scaler_) local_overflow |= !torch::isfinite(s.master.grad()).all().item<bool>();
  }
  streamed_multiplier_ = inv_scale;
  if (scaler_)
    for (const auto& g : streamed_grads_) local_overflow |= !torch::isfinite(g).all().item<bool>();
  overflow_ = false;
  if (scaler_) {
    auto flag = torch::tensor({local_overflow ? 1.0f : 0.0f});
    if (group_.size() > 1) dist::all_reduce(flag, group_, dist::ReduceOp::kMax);
    overflow_ = flag.item<float>() > 0;
  }
}

double MasterShards::clip_grad_norm(double max_norm, double norm_type, const parallel::DataParallelScope* scope) {
  torch::NoGradGuard no_grad;
  bool inf_norm = std::isinf(norm_type);
  double local = 0;
  for (const auto& s : slices_) {
    const auto& g = s.master.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (scope && !scope->counts_in_norm(s.name)) continue;
    double n = torch::linalg_vector_norm(g, norm_type, {}, false, torch::kFloat64).item<double>();
    local = inf_norm ? std::max(local, n) : local + std::pow(n, norm_type);
  }
  for (const auto& g : streamed_grads_) {
    if (g.numel() == 0) continue;
    double n = streamed_multiplier_ *
               torch::linalg_vector_norm(g, norm_type, {}, false, torch::kFloat64).item<double>();
    local = inf_norm ? std::max(local, n) : local + std::pow(n, norm_type);
  }
  auto total_t = torch::tensor({local}, torch::kFloat64);
  if (group_.size() > 1)
    dist::all_reduce(total_t, group_, inf_norm ? dist::ReduceOp::kMax : dist::ReduceOp::kSum);
  double sum = scope ? scope->combine_over_norm_group(total_t.item<double>(), inf_norm) : total_t.item<double>();
  double total = inf_norm ? sum : std::pow(sum, 1.0 / norm_type);
  // As torch::nn::utils::clip_grad_norm_: the coefficient is computed in fp32 and applied (a
  // factor of 1 changes no bit and is skipped; a handed-over bf16 gradient becomes fp32 first).
  float coef = std::min(1.0f, static_cast<float>(max_norm) / (static_cast<float>(total) + 1e-6f));
  for (auto& s : slices_) amp::MixedPrecision::scale_master_grad(s.master, coef);
  streamed_multiplier_ *= coef;
  return total;
}

bool MasterShards::step(torch::optim::Optimizer& optimizer) {
  torch::NoGradGuard no_grad;
  if (scaler_) scaler_->update(overflow_);
  if (overflow_) {
    ++skipped_steps_;
    return false;
  }
  optimizer.step();
  return true;
}

std::vector<checkpoint::OptimizerSlice> MasterShards::checkpoint_slices() const {
  std::vector<checkpoint::OptimizerSlice> out;
  for (const auto& s : slices_) {
    int64_t full = 1;
    for (auto d : s.shape) full *= d;
    out.push_back({s.name, s.offset, s.master, full});
  }
  return out;
}

std::map<std::string, double> MasterShards::scaler_state() const {
  return scaler_ ? scaler_->state_dict() : std::map<std::string, double>{};
}

void MasterShards::load_scaler_state(const std::map<std::string, double>& state) {
  if (scaler_ && !state.empty()) scaler_->load_state_dict(state);
}

}  // namespace colossal::zero
