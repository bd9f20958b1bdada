#pragma once
// What one linear layer of each tensor-parallel mode hands to the collectives per rank, forward
// and backward: the formulas behind the grid's layers (grid_layers.h) and Megatron's 1D pair,
// in the communication profiler's terms (all_gather: the output; reduce_scatter: the input;
// all_reduce: the tensor). Tests check them against the profiler byte for byte; bench_parallel
// prints them beside its measurements.
//
// With n tokens in the replica's batch, a layer `in` -> `out` and e bytes per element:
//   2d      forward gathers the input's features [n/q, in] and the weight's columns [out/q, in];
//           backward gathers both again and reduce-scatters their gradients: 3 x each
//           (Optimus's SUMMA broadcasts move the same blocks).
//   2.5d    2d within each of the d layers on n/(q d) tokens, plus the weight block's gradient
//           [out/q, in/q] all-reduced over the depth.
//   3d      forward gathers the input's rows [n/q, in/q] and the weight's rows [out/q, in/q] and
//           reduce-scatters the product [n/q, out/q]; backward gathers the input, the weight and
//           the output gradient and reduce-scatters the input's and the weight's gradients.
//   1d      a column layer all-reduces its input gradient [n, in] in backward; a row layer its
//           output [n, out] in forward (the pair's f and g).
//   A bias adds its gradient's all-reduce over the ranks sharing it ([out/q]; 1d: none). A grid
//   side q of one gathers and scatters nothing.
#include <cstdint>

#include "core/dist/parallel_dims.h"

namespace colossal::parallel {

struct CollectiveBytes {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0;
  int64_t total() const { return all_gather + reduce_scatter + all_reduce; }
  CollectiveBytes& operator+=(const CollectiveBytes& o) {
    all_gather += o.all_gather;
    reduce_scatter += o.reduce_scatter;
    all_reduce += o.all_reduce;
    return *this;
  }
};

struct LinearShape {
  int64_t tokens = 0;  // in the data-parallel replica's batch
  int64_t in = 0, out = 0;
  bool bias = false;
  bool column = true;  // 1d: a column layer (else a row layer); 3d: the layer's orientation
};

/// Per rank, one forward and backward. `q`, `depth`: the grid (tensor_grid_shape); 1d: q = tp.
CollectiveBytes linear_collective_bytes(dist::TensorParallelMode mode, int q, int depth, const LinearShape& layer,
                                        int element_bytes);

}  // namespace colossal::parallel
