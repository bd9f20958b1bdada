#pragma once
// How embedding tables are laid out over ranks (TorchRec's sharding types):
//
//   table   a whole table on one rank: a batch's ids for it go there, its pooled embeddings come
//           back. The least communication; a table must fit one rank.
//   row     the rows split in contiguous blocks over the ranks: each id goes to the rank holding
//           its row, every rank returns partial sums of each bag, the requester adds them.
//           For tables too large for one rank.
//   column  the embedding width split over the ranks: every id goes to every column shard, the
//           requester concatenates the pieces. For wide tables; a table splits into at most
//           `dim` pieces.
//
// The planner (sharding "auto") takes the largest tables first: a table no larger than an even
// share of all tables' bytes goes table-wise to the least-loaded rank; a larger one row-wise
// over every rank (column-wise when it has fewer rows than ranks). The plan is then checked
// against each rank's memory budget, naming the rank and the shortfall when it does not fit.
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::recsys {

struct Shard {
  int rank = 0;
  int64_t row_begin = 0, rows = 0, col_begin = 0, cols = 0;
};

struct TablePlan {
  std::string kind;  // table | row | column
  int64_t rows = 0, dim = 0;
  std::vector<Shard> shards;  // row: in row order; column: in column order
  int64_t row_block() const;  // row: rows per shard (the last may hold fewer)
};

struct PlannerOptions {
  std::string sharding = "auto";  // auto | table | row | column
  int world = 1;
  double bytes_per_element = 8;   // a table element and its optimizer state (adagrad: 4 + 4)
  double memory_per_rank = 0;     // bytes a rank may hold; 0: no limit (tables on the offload disk)
  bool allow_column = true;       // false: the optimizer keeps per-row state (rowwise_adagrad)
  void validate() const;
};

/// One plan per table (tables[i] rows of width dim). Every rank computes the same plan from the
/// same inputs.
std::vector<TablePlan> plan_sharding(const std::vector<int64_t>& table_rows, int64_t dim, const PlannerOptions& options);

/// "table 0: table-wise on rank 1; table 1: row-wise over 4 ranks; ..." (one line per table).
std::string describe_plan(const std::vector<TablePlan>& plan, const std::string& name);

}  // namespace colossal::recsys
