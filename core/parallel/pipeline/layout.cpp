#include "core/parallel/pipeline/layout.h"

#include "core/common/check.h"
#include "core/parallel/pipeline/stage_split.h"

namespace colossal::parallel::pipeline {

std::vector<std::pair<int64_t, int64_t>> PipelineLayout::layer_ranges(int64_t layers) const {
  if (!enabled()) return {{0, layers}};
  COLOSSAL_CHECK(layer_costs.empty() || static_cast<int64_t>(layer_costs.size()) == layers, "[pipeline] ",
                 layer_costs.size(), " layer costs given for a model of ", layers, " layers");
  const auto all = layer_costs.empty() ? split_layers(layers, virtual_stages())
                                       : split_layers_by_cost(layer_costs, virtual_stages());
  std::vector<std::pair<int64_t, int64_t>> mine;
  for (int c = 0; c < chunks(); ++c) mine.push_back(all[virtual_stage(c)]);
  return mine;
}

int PipelineLayout::chunk_of_first() const {
  for (int c = 0; c < chunks(); ++c)
    if (virtual_stage(c) == 0) return c;
  return -1;
}

int PipelineLayout::chunk_of_last() const {
  for (int c = 0; c < chunks(); ++c)
    if (virtual_stage(c) == virtual_stages() - 1) return c;
  return -1;
}

bool PipelineLayout::holds_first() const { return chunk_of_first() >= 0; }
bool PipelineLayout::holds_last() const { return chunk_of_last() >= 0; }

}  // namespace colossal::parallel::pipeline
