#pragma once
// All-gather and reduce-scatter along any dimension: every rank's tensor concatenated along `dim` in rank order.
// The collectives gather along dimension 0 of contiguous buffers, so the dimension is moved to
// the front for the call and back after.
#include <ATen/core/Tensor.h>

#include "core/dist/group.h"

namespace colossal::parallel {

at::Tensor all_gather_along(const at::Tensor& x, int64_t dim, const dist::Group& g);

/// The sum over the group of every rank's `x`, of which this rank keeps block `rank` of `dim`
/// (the dimension must divide by the group size; the error says so).
at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, const dist::Group& g);

}  // namespace colossal::parallel
