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

/// The same by measured cost: contiguous ranges whose summed `layer_costs` are as even as the
/// layer boundaries allow (the largest stage's cost minimised), each holding at least one layer.
std::vector<std::pair<int64_t, int64_t>> split_layers_by_cost(const std::vector<double>& layer_costs, int stages);

}  // namespace colossal::parallel::pipeline
