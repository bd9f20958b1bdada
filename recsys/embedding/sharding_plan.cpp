#include "recsys/embedding/sharding_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/common/check.h"

namespace colossal::recsys {
namespace {

std::string gib(double bytes) {
  std::ostringstream s;
  s.precision(3);
  s << bytes / (1 << 30) << " GiB";
  return s.str();
}

void split_rows(TablePlan& t, int world) {
  const int64_t pieces = std::min<int64_t>(world, t.rows);
  const int64_t block = (t.rows + pieces - 1) / pieces;
  for (int64_t b = 0, r = 0; b * block < t.rows; ++b, ++r)
    t.shards.push_back({static_cast<int>(r), b * block, std::min(block, t.rows - b * block), 0, t.dim});
}

void split_columns(TablePlan& t, int world, int first_rank) {
  const int64_t pieces = std::min<int64_t>(world, t.dim);
  for (int64_t p = 0, begin = 0; p < pieces; ++p) {
    const int64_t cols = t.dim / pieces + (p < t.dim % pieces ? 1 : 0);
    t.shards.push_back({static_cast<int>((first_rank + p) % world), 0, t.rows, begin, cols});
    begin += cols;
  }
}

}  // namespace

int64_t TablePlan::row_block() const { return shards.empty() ? rows : shards.front().rows; }

void PlannerOptions::validate() const {
  COLOSSAL_CHECK(sharding == "auto" || sharding == "table" || sharding == "row" || sharding == "column",
                 "[sharding] '", sharding, "': expected auto, table, row or column");
  COLOSSAL_CHECK(world >= 1, "[sharding] world ", world, ": expected >= 1");
  COLOSSAL_CHECK(sharding != "column" || allow_column, "[sharding] column-wise shards with rowwise_adagrad: each shard "
                 "would keep its own per-row state, which is not the unsharded optimizer (use adagrad or adamw, or "
                 "table/row sharding)");
}

std::vector<TablePlan> plan_sharding(const std::vector<int64_t>& table_rows, int64_t dim, const PlannerOptions& o) {
  o.validate();
  COLOSSAL_CHECK(dim >= 1, "[sharding] dim ", dim, ": expected >= 1");
  std::vector<TablePlan> plan(table_rows.size());
  std::vector<double> load(o.world, 0);
  auto bytes = [&](int64_t rows, int64_t cols) { return static_cast<double>(rows) * cols * o.bytes_per_element; };
  double total = 0;
  for (int64_t r : table_rows) total += bytes(r, dim);
  // Largest first, so the greedy table-wise placement balances.
  std::vector<size_t> order(table_rows.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return table_rows[a] > table_rows[b]; });
  auto least_loaded = [&] { return static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin()); };
  for (size_t i : order) {
    COLOSSAL_CHECK(table_rows[i] >= 1, "[sharding] table ", i, " has ", table_rows[i], " rows");
    auto& t = plan[i];
    t.rows = table_rows[i];
    t.dim = dim;
    std::string kind = o.sharding;
    if (kind == "auto") {
      if (bytes(t.rows, dim) <= total / o.world || o.world == 1) kind = "table";
      else kind = t.rows >= o.world || !o.allow_column ? "row" : "column";
    }
    t.kind = kind;
    if (kind == "table") t.shards.push_back({least_loaded(), 0, t.rows, 0, dim});
    else if (kind == "row") split_rows(t, o.world);
    else split_columns(t, o.world, least_loaded());
    for (const auto& s : t.shards) load[s.rank] += bytes(s.rows, s.cols);
  }
  if (o.memory_per_rank > 0)
    for (int r = 0; r < o.world; ++r)
      COLOSSAL_CHECK(load[r] <= o.memory_per_rank, "[sharding] the ", o.sharding, " plan puts ", gib(load[r]),
                     " of embedding tables on rank ", r, ", which may hold ", gib(o.memory_per_rank), " (", o.world,
                     " ranks, ", gib(total), " in all): use more ranks, row sharding, or --cache_ratio with "
                     "--offload_dir to keep the tables on disk");
  return plan;
}

std::string describe_plan(const std::vector<TablePlan>& plan, const std::string& name) {
  std::ostringstream s;
  for (size_t i = 0; i < plan.size(); ++i) {
    const auto& t = plan[i];
    s << name << " " << i << " (" << t.rows << " x " << t.dim << "): ";
    if (t.kind == "table") s << "table-wise on rank " << t.shards[0].rank;
    else s << t.kind << "-wise over " << t.shards.size() << " rank(s)";
    s << "\n";
  }
  return s.str();
}

}  // namespace colossal::recsys
