#include "core/parallel/expert/router.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::parallel::expert {

void RouterOptions::validate() const {
  COLOSSAL_CHECK(num_experts >= 1, "[moe] num_local_experts: expected >= 1, got ", num_experts);
  COLOSSAL_CHECK(top_k >= 1 && top_k <= num_experts, "[moe] num_experts_per_tok: expected 1..", num_experts,
                 " (the number of experts), got ", top_k);
  COLOSSAL_CHECK(capacity_factor >= 0 && std::isfinite(capacity_factor),
                 "[moe] capacity_factor: expected >= 0 (0: dropless), got ", capacity_factor);
}

int64_t expert_capacity(int64_t tokens, const RouterOptions& o) {
  if (o.capacity_factor <= 0) return 0;
  const double c = std::ceil(o.capacity_factor * static_cast<double>(tokens * o.top_k) / static_cast<double>(o.num_experts));
  return std::max<int64_t>(1, static_cast<int64_t>(c));
}

Routing route(const at::Tensor& logits, const RouterOptions& o) {
  COLOSSAL_CHECK(logits.dim() == 2 && logits.size(1) == o.num_experts, "[moe] router logits: expected [tokens, ",
                 o.num_experts, "], got ", logits.sizes());
  Routing r;
  r.logits = logits;
  r.probs = torch::softmax(logits.to(torch::kFloat32), -1);
  auto [top, idx] = r.probs.topk(o.top_k, -1);
  r.weights = o.normalize_top_k ? top / top.sum(-1, true) : top;
  r.experts = idx;
  r.capacity = expert_capacity(logits.size(0), o);
  if (r.capacity == 0) {
    r.kept = torch::ones_like(idx, torch::kBool);
    return r;
  }
  // Each assignment's place in its expert's queue: choice-major, then token order.
  torch::NoGradGuard no_grad;
  auto choice_major = idx.t().reshape({-1});                                   // [k N]
  auto onehot = torch::one_hot(choice_major, o.num_experts).to(torch::kInt64);  // [k N, E]
  auto place = (onehot.cumsum(0) - 1).gather(1, choice_major.unsqueeze(1)).squeeze(1);
  r.kept = place.lt(r.capacity).view({o.top_k, -1}).t().contiguous();
  return r;
}

void RouterLosses::clear() { *this = RouterLosses(); }

void RouterLosses::add(const Routing& r) {
  const int64_t E = r.probs.size(1);
  at::Tensor assigned, kept;
  {
    torch::NoGradGuard no_grad;
    auto flat = r.experts.reshape({-1});
    assigned = torch::bincount(flat, {}, E).to(torch::kFloat32);
    kept = assigned;  // dropless: every assignment computed
    if (r.capacity > 0) {
      kept = torch::bincount(flat, r.kept.reshape({-1}).to(torch::kFloat32), E).to(torch::kFloat32);
      dropped_ += flat.size(0) - static_cast<int64_t>(kept.sum().item<double>());
    }
  }
  auto prob_sum = r.probs.sum(0);
  auto z = torch::logsumexp(r.logits.to(torch::kFloat32), -1).pow(2).sum();
  if (layers_ == 0) {
    experts_ = E;
    assigned_ = assigned;
    kept_ = kept;
    prob_sum_ = prob_sum;
    z_sum_ = z;
  } else {
    COLOSSAL_CHECK(E == experts_, "[moe] layers with ", experts_, " and ", E, " experts in one forward");
    assigned_ = assigned_ + assigned;
    kept_ = kept_ + kept;
    prob_sum_ = prob_sum_ + prob_sum;
    z_sum_ = z_sum_ + z;
  }
  rows_ += r.probs.size(0);
  ++layers_;
}

// Layout: prob sums [E] | assigned [E] | kept [E] | z sum | rows | layers | dropped | zeros.
at::Tensor RouterLosses::pack(int64_t width, c10::ScalarType dtype, int64_t experts) const {
  COLOSSAL_CHECK(width >= packed_width(experts), "[moe] ", experts, " experts' statistics need ",
                 packed_width(experts), " values; the row has ", width);
  if (layers_ == 0) return torch::zeros({width}, dtype);  // a stage without layers passes nothing on
  COLOSSAL_CHECK(experts == experts_, "[moe] packing ", experts_, " experts' statistics as ", experts);
  auto counts = torch::tensor({static_cast<double>(rows_), static_cast<double>(layers_), static_cast<double>(dropped_)},
                              torch::kFloat32);
  auto row = torch::cat({prob_sum_, assigned_, kept_, z_sum_.reshape({1}), counts,
                         torch::zeros({width - packed_width(experts_)}, torch::kFloat32)});
  return row.to(dtype);
}

void RouterLosses::unpack(const at::Tensor& row, int64_t experts) {
  COLOSSAL_CHECK(layers_ == 0, "[moe] unpack into statistics that already hold layers");
  auto r = row.reshape({-1}).to(torch::kFloat32);
  COLOSSAL_CHECK(r.numel() >= packed_width(experts), "[moe] a statistics row of ", r.numel(), " values for ", experts,
                 " experts");
  experts_ = experts;
  {
    torch::NoGradGuard no_grad;
    if (r.narrow(0, 3 * experts + 2, 1).item<float>() == 0) return;  // no layer before this stage
  }
  prob_sum_ = r.narrow(0, 0, experts);
  {
    torch::NoGradGuard no_grad;
    assigned_ = r.narrow(0, experts, experts).detach().clone();
    kept_ = r.narrow(0, 2 * experts, experts).detach().clone();
    auto counts = r.narrow(0, 3 * experts + 1, 3).to(torch::kFloat64);
    rows_ = std::llround(counts[0].item<double>());
    layers_ = std::llround(counts[1].item<double>());
    dropped_ = std::llround(counts[2].item<double>());
  }
  z_sum_ = r.narrow(0, 3 * experts, 1).squeeze(0);
}

at::Tensor RouterLosses::load_balancing_loss() const {
  COLOSSAL_CHECK(layers_ > 0, "[moe] no router ran in this forward");
  const double rows = static_cast<double>(rows_);
  return (assigned_ / rows * (prob_sum_ / rows)).sum() * static_cast<double>(experts_);
}

at::Tensor RouterLosses::z_loss() const {
  COLOSSAL_CHECK(layers_ > 0, "[moe] no router ran in this forward");
  return z_sum_ / static_cast<double>(rows_);
}

}  // namespace colossal::parallel::expert
