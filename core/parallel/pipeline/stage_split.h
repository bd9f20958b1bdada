#pragma once
// Which layers each virtual stage of a pipeline holds. The first virtual stage also owns the
// embedding and the last the final norm, head and loss, so layers left over from an even split
// go to the middle stages, which hold nothing else.
#include <cstdint>
#include <utility>
#include <vector>

namespace colossal::parallel::pipeline {

/// [begin, end) layer ranges for `stages` virtual stages over `layers` layers: equal counts, the
/// remainder one each to the middle stages (outermost first). Throws when a stage would be empty.
std::vector<std::pair<int64_t, int64_t>> split_layers(int64_t layers, int stages);

/// What a model's pieces cost, in any one unit (FLOPs, seconds): each decoder layer, and what the
/// first virtual stage (embedding) and the last (final norm, head, loss) do besides their layers.
struct StageCosts {
  std::vector<double> layers;
  double first = 0, last = 0;
};

/// The same by cost: contiguous ranges whose stage costs (their layers', plus the ends' on the
/// first and last stage) are as even as the layer boundaries allow (the largest stage's cost
/// minimised), each holding at least one layer.
std::vector<std::pair<int64_t, int64_t>> split_layers_by_cost(const StageCosts& costs, int stages);

}  // namespace colossal::parallel::pipeline
