#pragma once
// The four communication steps of tensor parallelism as autograd functions (Megatron's f and g
// and their gather/split cousins). Each is the identity in a group of one.
//   copy_to_group      forward: identity          backward: all-reduce (sum) of the gradient
//   reduce_from_group  forward: all-reduce (sum)  backward: identity
//   gather_last_dim    forward: all-gather along the last dimension  backward: own slice
//   split_last_dim     forward: own slice of the last dimension      backward: all-gather
// (gather_whole_along_dim and split_along_dim are the same two at any dimension: a whole tensor
// that every rank then uses the same way, and a whole tensor every rank holds, entering a split
// region),
// and three that the grids (grid/) and sequence parallelism share:
//   all_reduce_sum            forward: all-reduce (sum)   backward: all-reduce (sum) — a statistic
//                             every member computes part of and every member uses
//   gather_along_dim          forward: all-gather along `dim`   backward: reduce-scatter (each
//                             rank's use of the gathered tensor is partial)
//   reduce_scatter_along_dim  forward: reduce-scatter along `dim`   backward: all-gather
// Each is the identity where the group is absent or of one rank. On a handle tagged for FP8
// payloads (--fp8_communication), the all-gathers of gather_along_dim (forward, e4m3) and
// reduce_scatter_along_dim (backward, e5m2) carry FP8 (fp8_payload.h); reductions stay exact.
#include <torch/types.h>

#include "core/dist/group.h"

namespace colossal::parallel {

torch::Tensor copy_to_group(const torch::Tensor& x, const dist::Group& group);
torch::Tensor reduce_from_group(const torch::Tensor& x, const dist::Group& group);
torch::Tensor gather_last_dim(const torch::Tensor& x, const dist::Group& group);
torch::Tensor split_last_dim(const torch::Tensor& x, const dist::Group& group);
torch::Tensor gather_whole_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& group);
torch::Tensor split_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& group);
torch::Tensor all_reduce_sum(const torch::Tensor& x, const dist::Group& group);
torch::Tensor gather_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& group);
torch::Tensor reduce_scatter_along_dim(const torch::Tensor& x, int64_t dim, const dist::Group& group);

}  // namespace colossal::parallel
