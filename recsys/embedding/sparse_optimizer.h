#pragma once
// The row-wise (sparse) optimizers of the embedding tables: a step touches only the rows a batch
// read, and each row carries its own state, so the state can live wherever the row lives (a
// cache slot, a host table, a memory-mapped file, another rank's shard).
//
//   adagrad          per element: s += g*g; w -= lr * g / (sqrt(s) + eps)
//   rowwise_adagrad  one float per row (FBGEMM's row-wise Adagrad): s += mean(g*g); the same step
//                    with sqrt(s) shared by the row. For tables far larger than memory: the state
//                    costs 4 bytes a row instead of a second table.
//   adamw            per element m and v and a per-row step count (lazy: a row's moments advance
//                    only when it has a gradient), decoupled weight decay
#include <cstdint>
#include <string>

namespace colossal::recsys {

struct SparseOptimizerOptions {
  std::string kind = "adagrad";  // adagrad | rowwise_adagrad | adamw
  double lr = 0.01, eps = 1e-10, beta1 = 0.9, beta2 = 0.999, weight_decay = 0;
  int64_t state_width(int64_t dim) const;  // floats of state per row
  /// The state's layout over a row of `dim` columns, for splitting it by columns: per-column
  /// blocks (each `dim` wide) followed by per-row scalars.
  int64_t column_blocks() const { return kind == "adamw" ? 2 : kind == "adagrad" ? 1 : 0; }
  int64_t row_scalars() const { return kind == "adagrad" ? 0 : 1; }
  void validate() const;
};

/// One row's update: weights `w`, state `s` (state_width(dim) floats), gradient `g`.
void update_row(const SparseOptimizerOptions& o, float* w, float* s, const float* g, int64_t dim);

}  // namespace colossal::recsys
