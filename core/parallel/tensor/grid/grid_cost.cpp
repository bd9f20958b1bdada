#include "core/parallel/tensor/grid/grid_cost.h"

namespace colossal::parallel {

CollectiveBytes linear_collective_bytes(dist::TensorParallelMode mode, int q, int depth, const LinearShape& l,
                                        int element_bytes) {
  using Mode = dist::TensorParallelMode;
  CollectiveBytes b;
  const int64_t e = element_bytes;
  switch (mode) {
    case Mode::k1d:
      if (q > 1) b.all_reduce = e * l.tokens * (l.column ? l.in : l.out);
      return b;
    case Mode::k2d:
    case Mode::k2p5d: {
      const int64_t d = mode == Mode::k2d ? 1 : depth;
      const int64_t input = l.tokens / (q * d) * l.in, weight = l.out / q * l.in;
      if (q > 1) {  // a side of one gathers nothing (2.5d at q = 1 is the depth alone)
        b.all_gather = e * 2 * (input + weight);
        b.reduce_scatter = e * (input + weight);
      }
      const bool shared_bias = l.bias && q * d > 1;
      b.all_reduce = e * ((shared_bias ? l.out / q : 0) + (d > 1 ? l.out / q * l.in / q : 0));
      return b;
    }
    case Mode::k3d: {
      if (q == 1) return b;
      const int64_t input = l.tokens / q * l.in / q, weight = l.out / q * l.in / q, output = l.tokens / q * l.out / q;
      b.all_gather = e * (2 * input + 2 * weight + output);
      b.reduce_scatter = e * (output + input + weight);
      b.all_reduce = e * (l.bias ? l.out / q : 0);
      return b;
    }
  }
  return b;
}

}  // namespace colossal::parallel
