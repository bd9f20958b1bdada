#include "core/parallel/sequence/layout.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/parallel/gather_along.h"

namespace colossal::parallel {

bool shards_sequence(const ParallelContext& ctx) { return ctx.sp_size() > 1; }

void check_sequence_splits(int64_t seq_len, const ParallelContext& ctx) {
  const int n = ctx.sp_size();
  if (n == 1) return;
  const int64_t parts = ctx.sp_mode == SequenceParallelMode::kRingAttn ? 2 * n : n;
  COLOSSAL_CHECK(seq_len % parts == 0, "[sp] ", to_string(ctx.sp_mode), " with sp = ", n, ": sequence length ",
                 seq_len, " does not divide by ", parts,
                 ctx.sp_mode == SequenceParallelMode::kRingAttn ? " (2 x sp: the zigzag split)" : " (sp)");
}

torch::Tensor sequence_positions(int64_t seq_len, SequenceParallelMode mode, int r, int n) {
  if (n == 1 || mode == SequenceParallelMode::kNone) return torch::arange(seq_len, torch::kInt64);
  if (mode != SequenceParallelMode::kRingAttn) {
    const int64_t part = seq_len / n;
    return torch::arange(r * part, (r + 1) * part, torch::kInt64);
  }
  const int64_t chunk = seq_len / (2 * n);
  return torch::cat({torch::arange(r * chunk, (r + 1) * chunk, torch::kInt64),
                     torch::arange((2 * n - 1 - r) * chunk, (2 * n - r) * chunk, torch::kInt64)});
}

torch::Tensor local_positions(int64_t seq_len, const ParallelContext& ctx) {
  check_sequence_splits(seq_len, ctx);
  return sequence_positions(seq_len, ctx.sp_mode, ctx.sp_rank(), ctx.sp_size());
}

torch::Tensor take_local(const torch::Tensor& full, const ParallelContext& ctx) {
  if (ctx.sp_size() == 1) return full;
  return full.index_select(1, local_positions(full.size(1), ctx).to(full.device()));
}

torch::Tensor gather_local(const torch::Tensor& local, const ParallelContext& ctx) {
  const int n = ctx.sp_size();
  if (n == 1) return local;
  const auto& g = ctx.sequence_group();
  auto all = all_gather_along(local, 1, g);  // rank k's block of the sequence dimension, in rank order
  // Block k's rows sit at rank k's positions.
  std::vector<torch::Tensor> positions;
  const int64_t seq_len = all.size(1);
  for (int k = 0; k < n; ++k) positions.push_back(sequence_positions(seq_len, ctx.sp_mode, k, n));
  auto order = torch::cat(positions).to(local.device());
  return torch::empty_like(all).index_copy_(1, order, all);
}

}  // namespace colossal::parallel
