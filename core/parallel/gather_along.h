#pragma once
// All-gather along any dimension: every rank's tensor concatenated along `dim` in rank order.
// The collectives gather along dimension 0 of contiguous buffers, so the dimension is moved to
// the front for the call and back after.
#include <torch/torch.h>

#include "core/dist/collectives.h"

namespace colossal::parallel {

inline torch::Tensor all_gather_along(const torch::Tensor& x, int64_t dim, const dist::Group& g) {
  auto moved = x.movedim(dim, 0).contiguous();
  auto sizes = moved.sizes().vec();
  sizes[0] *= g.size();
  auto out = torch::empty(sizes, moved.options());
  dist::all_gather(out, moved, g);
  return out.movedim(0, dim).contiguous();
}

}  // namespace colossal::parallel
