#include "core/parallel/pipeline/stage_split.h"

#include <algorithm>
#include <limits>

#include "core/common/check.h"

namespace colossal::parallel::pipeline {

std::vector<std::pair<int64_t, int64_t>> split_layers(int64_t layers, int stages) {
  COLOSSAL_CHECK(stages >= 1 && layers >= stages, "[pipeline] ", layers, " layers cannot fill ", stages,
                 " virtual stages (pp x num_model_chunks): every stage needs at least one layer");
  std::vector<int64_t> count(stages, layers / stages);
  // The remainder (at most stages - 1 layers): the middle stages, outermost first, then the
  // first stage (the head on the last is usually the heavier end).
  std::vector<int> order;
  for (int lo = 1, hi = stages - 2; lo <= hi; ++lo, --hi) {
    order.push_back(lo);
    if (hi != lo) order.push_back(hi);
  }
  order.push_back(0);
  order.push_back(stages - 1);
  for (int64_t i = 0; i < layers % stages; ++i) ++count[order[i]];
  std::vector<std::pair<int64_t, int64_t>> out;
  int64_t at = 0;
  for (int s = 0; s < stages; ++s) {
    out.emplace_back(at, at + count[s]);
    at += count[s];
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> split_layers_by_cost(const StageCosts& stage_costs, int stages) {
  const auto& costs = stage_costs.layers;
  const int64_t n = static_cast<int64_t>(costs.size());
  COLOSSAL_CHECK(stages >= 1 && n >= stages, "[pipeline] ", n, " layers cannot fill ", stages,
                 " virtual stages: every stage needs at least one layer");
  for (size_t i = 0; i < costs.size(); ++i)
    COLOSSAL_CHECK(costs[i] >= 0, "[pipeline] layer ", i, " has a negative cost ", costs[i]);
  COLOSSAL_CHECK(stage_costs.first >= 0 && stage_costs.last >= 0, "[pipeline] negative end costs: first ",
                 stage_costs.first, ", last ", stage_costs.last);
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  // best[s][i]: the least possible largest stage cost splitting layers [0, i) into s stages (the
  // first of them carrying the embedding; the last stage, s = stages, ends at n with the head).
  constexpr double kInf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<int64_t>> cut(stages + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s)
    for (int64_t i = s; i <= n; ++i)
      for (int64_t j = s - 1; j < i; ++j) {
        const double own = prefix[i] - prefix[j] + (s == 1 ? stage_costs.first : 0) +
                           (s == stages ? stage_costs.last : 0);
        const double v = std::max(best[s - 1][j], own);
        if (v < best[s][i]) {
          best[s][i] = v;
          cut[s][i] = j;
        }
      }
  std::vector<std::pair<int64_t, int64_t>> out(stages);
  for (int64_t s = stages, i = n; s >= 1; --s) {
    out[s - 1] = {cut[s][i], i};
    i = cut[s][i];
  }
  return out;
}

}  // namespace colossal::parallel::pipeline
