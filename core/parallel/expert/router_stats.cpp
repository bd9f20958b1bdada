#include "core/parallel/expert/router_stats.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/dist/collectives.h"

namespace colossal::parallel::expert {

void RouterWindow::add(const RouterLosses& forward) {
  if (forward.empty()) return;
  torch::NoGradGuard no_grad;
  auto counts = forward.tokens_per_expert().to(torch::kFloat64).contiguous();
  if (tokens_.empty()) tokens_.assign(counts.numel(), 0.0);
  for (int64_t e = 0; e < counts.numel() && e < static_cast<int64_t>(tokens_.size()); ++e)
    tokens_[e] += counts.data_ptr<double>()[e];
  aux_ += forward.load_balancing_loss().item<double>();
  z_ += forward.z_loss().item<double>();
  dropped_ += static_cast<double>(forward.dropped());
  assigned_ += counts.sum().item<double>() + static_cast<double>(forward.dropped());
  ++forwards_;
}

RouterWindow::Report RouterWindow::report(const dist::Group& replicas) const {
  Report r;
  // Every replica takes part even with nothing to add, so the collective matches.
  std::vector<double> packed = tokens_;
  packed.insert(packed.end(), {aux_, z_, dropped_, assigned_, static_cast<double>(forwards_)});
  auto t = torch::tensor(packed, torch::kFloat64);
  if (replicas.is_member() && replicas.size() > 1) dist::all_reduce(t, replicas);
  const auto* v = t.data_ptr<double>();
  const size_t E = tokens_.size();
  const double forwards = v[E + 4];
  if (forwards == 0 || E == 0) return r;
  r.tokens_per_expert.assign(v, v + E);
  double total = 0, most = 0, least = v[0];
  for (size_t e = 0; e < E; ++e) {
    total += v[e];
    most = std::max(most, v[e]);
    least = std::min(least, v[e]);
  }
  const double mean = total / static_cast<double>(E);
  r.metrics = {{"aux_loss", v[E] / forwards},
               {"z_loss", v[E + 1] / forwards},
               {"load_max", mean > 0 ? most / mean : 0},
               {"load_min", mean > 0 ? least / mean : 0}};
  if (v[E + 2] > 0) r.metrics.push_back({"dropped", v[E + 3] > 0 ? v[E + 2] / v[E + 3] : 0});
  return r;
}

}  // namespace colossal::parallel::expert
