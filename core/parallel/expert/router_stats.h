#pragma once
// Router statistics over a logging window, for the progress line and the metrics log: tokens
// each expert computed (summed over the data-parallel replicas), how uneven that is (the busiest
// and idlest expert against the mean), the share of assignments the capacity dropped, and the
// mean load-balancing and z losses.
#include <string>
#include <utility>
#include <vector>

#include "core/dist/group.h"
#include "core/parallel/expert/router.h"

namespace colossal::parallel::expert {

class RouterWindow {
 public:
  /// Every rank that reports together gives the same number of experts (a pipeline stage that
  /// routes nothing still takes part).
  explicit RouterWindow(int64_t experts = 0) : tokens_(experts, 0.0) {}
  /// One forward's routing (RouterLosses after it).
  void add(const RouterLosses& forward);
  struct Report {
    std::vector<std::pair<std::string, double>> metrics;  // aux_loss, z_loss, load_max, load_min, dropped
    std::vector<double> tokens_per_expert;
  };
  /// Combined over `replicas` (collective; each rank's own when not a member). Empty when no
  /// forward was added.
  Report report(const dist::Group& replicas) const;

 private:
  std::vector<double> tokens_;  // per expert
  double aux_ = 0, z_ = 0, dropped_ = 0, assigned_ = 0;
  int64_t forwards_ = 0;
};

}  // namespace colossal::parallel::expert
