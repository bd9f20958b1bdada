#pragma once
// An embedding table's initial values, uniform(+-1/sqrt(rows)) as DLRM's, made in fixed blocks
// of rows from the seed alone: any slice (a shard's rows and columns) can be made by itself and
// equals the same slice of the whole table, so a table sharded over any number of ranks starts
// from the numbers one process starts from.
#include <torch/types.h>

#include <cstdint>

namespace colossal::recsys {

struct TableSlice {
  uint64_t seed = 0;
  int64_t total_rows = 0, total_dim = 0;  // the whole table
  int64_t row_begin = 0, col_begin = 0;   // where `out` sits in it
};

/// Fills `out` [rows, cols] (contiguous float, any storage) with its slice of the table.
void init_table_slice(torch::Tensor& out, const TableSlice& slice);

}  // namespace colossal::recsys
