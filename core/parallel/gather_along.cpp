#include "core/parallel/gather_along.h"

#include <torch/torch.h>

#include "core/dist/collectives.h"

namespace colossal::parallel {

at::Tensor all_gather_along(const at::Tensor& x, int64_t dim, const dist::Group& g) {
  auto moved = x.movedim(dim, 0).contiguous();
  auto sizes = moved.sizes().vec();
  sizes[0] *= g.size();
  auto out = torch::empty(sizes, moved.options());
  dist::all_gather(out, moved, g);
  return out.movedim(0, dim).contiguous();
}

}  // namespace colossal::parallel
