#include "core/parallel/pipeline/layout.h"

#include "core/common/check.h"
#include "core/parallel/pipeline/stage_split.h"

namespace colossal::parallel::pipeline {

Balance parse_balance(const std::string& name) {
  if (name == "count") return Balance::kCount;
  if (name == "cost") return Balance::kCost;
  COLOSSAL_FAIL("[pipeline] pp_balance: expected count or cost, got '", name, "'");
}

std::vector<std::pair<int64_t, int64_t>> PipelineLayout::layer_ranges(int64_t layers, const StageCosts& costs) const {
  if (!enabled()) return {{0, layers}};
  const bool by_cost = balance == Balance::kCost && !costs.layers.empty();
  COLOSSAL_CHECK(!by_cost || static_cast<int64_t>(costs.layers.size()) == layers, "[pipeline] ", costs.layers.size(),
                 " layer costs given for a model of ", layers, " layers");
  const auto all = by_cost ? split_layers_by_cost(costs, virtual_stages()) : split_layers(layers, virtual_stages());
  std::vector<std::pair<int64_t, int64_t>> mine;
  for (int c = 0; c < chunks(); ++c) mine.push_back(all[virtual_stage(c)]);
  return mine;
}

int64_t PipelineLayout::microbatches_for(int64_t batch_size) const {
  if (microbatch_size <= 0) {
    COLOSSAL_CHECK(batch_size % schedule.microbatches == 0, "[pipeline] batch size ", batch_size,
                   " does not divide into ", schedule.microbatches,
                   " microbatches (--num_microbatches; default pp x num_model_chunks)");
    return schedule.microbatches;
  }
  COLOSSAL_CHECK(batch_size % microbatch_size == 0, "[pipeline] batch size ", batch_size,
                 " does not divide into microbatches of ", microbatch_size, " (--microbatch_size)");
  auto options = schedule;
  options.microbatches = static_cast<int>(batch_size / microbatch_size);
  options.validate();  // e.g. fewer microbatches than stages for 1f1b
  return options.microbatches;
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
