#include "core/parallel/autograd_group.h"
#include "core/parallel/fp8_payload.h"
#include "core/parallel/sequence/sequence_ops.h"
#include "core/parallel/tensor/comm_ops.h"

#include <torch/autograd.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::parallel {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;


// Ulysses exchange: split dimension `scatter` into n parts (part k goes to rank k) and
// concatenate what arrives along dimension `gather` (rank k's part at position k).
// On a handle tagged for FP8 payloads each destination's block travels as FP8 with its own scale.
torch::Tensor exchange(const torch::Tensor& x, const dist::Group& g, int64_t scatter, int64_t gather,
                       amp::Fp8Format format) {
  const int n = g.size();
  COLOSSAL_CHECK(x.size(scatter) % n == 0, "[sp] all_to_all: dimension ", scatter, " of size ", x.size(scatter),
                 " does not divide by the sequence-parallel size ", n);
  auto sizes = x.sizes().vec();
  // [.., n, s/n, ..] with the new n axis moved to the front: row k is what rank k receives.
  std::vector<int64_t> split = sizes;
  split[scatter] = sizes[scatter] / n;
  split.insert(split.begin() + scatter, n);
  auto send = x.reshape(split).movedim(scatter, 0).contiguous();
  auto recv = all_to_all_rows_payload(send, g, format);
  // recv row k came from rank k: it is the k-th block along `gather`.
  auto placed = recv.movedim(0, gather);  // [.., n, g, ..] with n before the gathered dimension
  auto out_sizes = x.sizes().vec();
  out_sizes[scatter] /= n;
  out_sizes[gather] *= n;
  return placed.reshape(out_sizes).contiguous();
}

// [B, T/n, H, D] <-> [B, T, H/n, D]
struct SequenceToHeads : torch::autograd::Function<SequenceToHeads> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<GroupHolder> g) {
    save_group(ctx, g);
    return exchange(x, g->group, /*scatter=*/2, /*gather=*/1, amp::Fp8Format::kE4M3);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {exchange(grads[0], saved_group(ctx), 1, 2, amp::Fp8Format::kE5M2), torch::Tensor()};
  }
};

struct HeadsToSequence : torch::autograd::Function<HeadsToSequence> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, c10::intrusive_ptr<GroupHolder> g) {
    save_group(ctx, g);
    return exchange(x, g->group, /*scatter=*/1, /*gather=*/2, amp::Fp8Format::kE4M3);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {exchange(grads[0], saved_group(ctx), 2, 1, amp::Fp8Format::kE5M2), torch::Tensor()};
  }
};

template <typename F>
torch::Tensor apply_sequence_op(const torch::Tensor& x, const dist::Group& g) {
  if (!g.is_member() || g.size() == 1) return x;
  return F::apply(x, hold(g));
}

}  // namespace

// The sequence is dimension 1: tensor/comm_ops.h's gather and reduce-scatter along it.
torch::Tensor gather_sequence(const torch::Tensor& x, const dist::Group& g) { return gather_along_dim(x, 1, g); }
torch::Tensor reduce_scatter_sequence(const torch::Tensor& x, const dist::Group& g) {
  if (g.is_member())
    COLOSSAL_CHECK(x.size(1) % g.size() == 0, "[sp] sequence length ", x.size(1), " does not divide by the group size ",
                   g.size(), " (", g.describe(), ")");
  return reduce_scatter_along_dim(x, 1, g);
}
torch::Tensor sequence_to_heads(const torch::Tensor& x, const dist::Group& g) { return apply_sequence_op<SequenceToHeads>(x, g); }
torch::Tensor heads_to_sequence(const torch::Tensor& x, const dist::Group& g) { return apply_sequence_op<HeadsToSequence>(x, g); }

}  // namespace colossal::parallel
