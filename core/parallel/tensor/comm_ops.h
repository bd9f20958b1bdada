#pragma once
// The four communication steps of tensor parallelism as autograd functions (Megatron's f and g
// and their gather/split cousins). Each is the identity in a group of one.
//   copy_to_group      forward: identity          backward: all-reduce (sum) of the gradient
//   reduce_from_group  forward: all-reduce (sum)  backward: identity
//   gather_last_dim    forward: all-gather along the last dimension  backward: own slice
//   split_last_dim     forward: own slice of the last dimension      backward: all-gather
#include <torch/types.h>

#include "core/dist/group.h"

namespace colossal::parallel {

torch::Tensor copy_to_group(const torch::Tensor& x, const dist::Group& group);
torch::Tensor reduce_from_group(const torch::Tensor& x, const dist::Group& group);
torch::Tensor gather_last_dim(const torch::Tensor& x, const dist::Group& group);
torch::Tensor split_last_dim(const torch::Tensor& x, const dist::Group& group);

}  // namespace colossal::parallel
