#pragma once
// Token dispatch to experts and the weighted combine. The kept (token, expert) assignments are
// sorted by expert, so each expert runs one matmul over all its tokens. Under expert parallelism
// (an ep group), each rank holds an even share of the experts: the rows for another rank's experts
// travel there in one all-to-all with uneven splits (the per-expert counts are exchanged first),
// the owner runs them grouped by expert and the results travel back the same way. Both exchanges
// are autograd functions: backward sends the gradients back along the same routes.
#include <ATen/core/Tensor.h>

#include <functional>

#include "core/dist/group.h"
#include "core/parallel/expert/router.h"

namespace colossal::parallel::expert {

/// Which experts this rank holds: all of them, or under expert parallelism the ep group's
/// rank-th even share, [rank x E/ep, (rank + 1) x E/ep).
struct ExpertPlacement {
  int64_t num_experts = 1;
  dist::Group ep;  // not a member (default): every expert here

  int ep_size() const { return ep.is_member() ? ep.size() : 1; }
  int ep_rank() const { return ep.is_member() ? ep.rank() : 0; }
  int64_t local_count() const { return num_experts / ep_size(); }
  int64_t first_local() const { return ep_rank() * local_count(); }
  bool holds(int64_t expert) const { return expert >= first_local() && expert < first_local() + local_count(); }
  /// Names the problem when the experts do not share out evenly over ep.
  void validate() const;
};

/// The experts this rank runs. `run(local_expert, rows)` is one expert on its rows [n, D] ->
/// [n, D]; `finish`, when set, is applied once to every local output together (the
/// tensor-parallel reduction of row-split down projections: one all-reduce, not one per expert).
struct LocalExperts {
  std::function<at::Tensor(int64_t local_expert, const at::Tensor& rows)> run;
  std::function<at::Tensor(const at::Tensor& outputs)> finish;
};

/// out[n] = sum over token n's kept assignments (e, w) of w x expert_e(x[n]); x: [N, D].
at::Tensor dispatch_and_combine(const at::Tensor& x, const Routing& routing, const ExpertPlacement& placement,
                                const LocalExperts& experts);

/// Seconds this process has spent in expert all-to-all exchanges (the counts and the rows, forward
/// and backward) since it started: what benchmarks report as the exchange's share of a step.
double exchange_seconds();

/// Rows exchanged over `group` with uneven splits, as an autograd function (backward exchanges the
/// gradient rows the other way). `send_splits[r]` rows go to rank r; `recv_splits[r]` arrive from it.
at::Tensor exchange_rows(const at::Tensor& rows, const std::vector<int64_t>& recv_splits,
                         const std::vector<int64_t>& send_splits, const dist::Group& group);

}  // namespace colossal::parallel::expert
