#include "core/parallel/gather_along.h"

#include <torch/torch.h>

#include "core/common/check.h"
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

at::Tensor reduce_scatter_along(const at::Tensor& x, int64_t dim, const dist::Group& g) {
  auto moved = x.movedim(dim, 0).contiguous();
  auto sizes = moved.sizes().vec();
  COLOSSAL_CHECK(sizes[0] % g.size() == 0, "[dist] reduce-scatter over ", g.describe(), ": dimension ", dim, " of ",
                 x.sizes(), " does not divide by ", g.size());
  sizes[0] /= g.size();
  auto out = torch::empty(sizes, moved.options());
  dist::reduce_scatter(out, moved, g);
  return out.movedim(0, dim).contiguous();
}

}  // namespace colossal::parallel
