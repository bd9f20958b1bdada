#include "core/parallel/expert/dispatch.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <numeric>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/autograd_group.h"
#include "core/parallel/fp8_payload.h"

namespace colossal::parallel::expert {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

std::atomic<int64_t> exchange_ns{0};

// Adds the lifetime of the object to exchange_seconds().
struct ExchangeTimer {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ~ExchangeTimer() {
    exchange_ns += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
  }
};

// Tokens travel as FP8 (one scale per token) on a handle tagged for FP8 payloads.
at::Tensor all_to_all_rows(const at::Tensor& rows, const std::vector<int64_t>& recv, const std::vector<int64_t>& send,
                           const dist::Group& group, amp::Fp8Format format) {
  ExchangeTimer timer;
  return all_to_all_rows_payload(rows, group, format, recv, send);
}

struct ExchangeRows : torch::autograd::Function<ExchangeRows> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& rows, c10::intrusive_ptr<GroupHolder> g,
                            std::vector<int64_t> recv, std::vector<int64_t> send) {
    save_group(ctx, g);
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["send"] = send;
    return all_to_all_rows(rows, recv, send, g->group, amp::Fp8Format::kE4M3);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // What arrived from rank r goes back to it, and the reverse.
    auto recv = ctx->saved_data["recv"].toIntVector();
    auto send = ctx->saved_data["send"].toIntVector();
    return {all_to_all_rows(grads[0], send, recv, saved_group(ctx), amp::Fp8Format::kE5M2), {}, {}, {}};
  }
};

std::vector<int64_t> to_vector(const at::Tensor& t) {
  auto c = t.to(torch::kInt64).contiguous();
  return {c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel()};
}

// Runs this rank's experts on rows grouped by local expert (`counts[e]` rows for local expert e).
// An expert without rows still runs (on none), so its parameters get a (zero) gradient every step
// and every rank's data-parallel reduction sees the same parameters.
at::Tensor run_grouped(const at::Tensor& rows, const std::vector<int64_t>& counts, const LocalExperts& experts) {
  std::vector<at::Tensor> outs;
  int64_t at = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    outs.push_back(experts.run(static_cast<int64_t>(e), rows.narrow(0, at, counts[e])));
    at += counts[e];
  }
  auto out = outs.size() == 1 ? outs[0] : torch::cat(outs);
  // Every tensor-parallel peer holds the same rows, so all of them skip an empty reduction.
  return experts.finish && out.numel() > 0 ? experts.finish(out) : out;
}

}  // namespace

double exchange_seconds() { return static_cast<double>(exchange_ns.load()) * 1e-9; }

void ExpertPlacement::validate() const {
  COLOSSAL_CHECK(num_experts % ep_size() == 0, "[moe] ", num_experts, " experts (num_local_experts) do not divide by ep ",
                 ep_size(), ": every expert-parallel rank holds the same number of experts");
}

at::Tensor exchange_rows(const at::Tensor& rows, const std::vector<int64_t>& recv_splits,
                         const std::vector<int64_t>& send_splits, const dist::Group& group) {
  return ExchangeRows::apply(rows, hold(group), recv_splits, send_splits);
}

at::Tensor dispatch_and_combine(const at::Tensor& x, const Routing& routing, const ExpertPlacement& placement,
                                const LocalExperts& experts) {
  placement.validate();
  const int64_t E = placement.num_experts, k = routing.experts.size(1);
  COLOSSAL_CHECK(x.dim() == 2 && routing.experts.size(0) == x.size(0), "[moe] dispatch: ", x.sizes(), " rows for ",
                 routing.experts.size(0), " routed tokens");
  // Kept assignments (row n x k + j of the flattened [N, k]) sorted by expert; stable, so an
  // expert sees its tokens in order.
  at::Tensor assignment, token, counts_t;
  {
    torch::NoGradGuard no_grad;
    auto flat_expert = routing.experts.reshape({-1});
    auto kept_rows = routing.kept.reshape({-1}).nonzero().squeeze(1);
    auto chosen = flat_expert.index_select(0, kept_rows);
    auto order = std::get<1>(chosen.sort(/*stable=*/true, 0, false));
    assignment = kept_rows.index_select(0, order);
    token = assignment.div(k, "floor");
    counts_t = torch::bincount(chosen, {}, E);
  }
  const auto counts = to_vector(counts_t);
  auto rows = x.index_select(0, token);  // [M, D], grouped by expert
  at::Tensor out;
  const int ep = placement.ep_size();
  if (ep == 1) {
    out = run_grouped(rows, counts, experts);
  } else {
    const int64_t El = placement.local_count();
    // How many rows each rank sends for each of this rank's experts: [ep, El], source-major.
    auto from = torch::empty({E}, torch::kInt64);
    auto counts_c = counts_t.to(torch::kInt64).contiguous();
    {
      ExchangeTimer timer;
      dist::all_to_all(from, counts_c, placement.ep);
    }
    const auto recv_counts = to_vector(from);
    std::vector<int64_t> send(ep, 0), recv(ep, 0), per_local(El, 0);
    for (int r = 0; r < ep; ++r)
      for (int64_t e = 0; e < El; ++e) {
        send[r] += counts[r * El + e];
        recv[r] += recv_counts[r * El + e];
        per_local[e] += recv_counts[r * El + e];
      }
    auto received = exchange_rows(rows, recv, send, placement.ep);  // source-major, by expert within
    // Regroup expert-major (each expert's rows from every source together) and back after.
    std::vector<int64_t> start(ep * El), perm;
    perm.reserve(received.size(0));
    for (int64_t i = 0, at = 0; i < ep * El; ++i) {
      start[i] = at;
      at += recv_counts[i];
    }
    for (int64_t e = 0; e < El; ++e)
      for (int r = 0; r < ep; ++r)
        for (int64_t j = 0; j < recv_counts[r * El + e]; ++j) perm.push_back(start[r * El + e] + j);
    auto index = torch::tensor(perm, torch::kInt64);
    auto grouped = run_grouped(received.index_select(0, index), per_local, experts);
    auto restored = torch::empty_like(grouped).index_copy(0, index, grouped);  // back to source-major
    out = exchange_rows(restored, send, recv, placement.ep);
  }
  auto w = routing.weights.reshape({-1}).index_select(0, assignment).unsqueeze(1);
  auto weighted = (out.to(torch::kFloat32) * w).to(x.scalar_type());
  return torch::zeros_like(x).index_add(0, token, weighted);
}

}  // namespace colossal::parallel::expert
