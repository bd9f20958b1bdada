#pragma once
// Whole gradients out of whatever pieces the plugins keep them in: the oracle `colossal verify`
// compares between a parallel layout and one process. Not for the hot path (it allocates the
// whole model's gradients in fp32 and, when they are sharded, all-reduces them).
#include <torch/nn/module.h>

#include "core/checkpoint/optimizer_io.h"
#include "core/dist/group.h"

namespace colossal::booster {

/// Assembles fp32 gradients of `model`'s parameters (their names and shapes) from the pieces
/// `slices` hold in their .grad() — elements [offset, offset + numel) of each flattened
/// parameter — across the members of `group` (nullptr: the pieces are all here). Pieces held by
/// several members (replicas) are averaged. A parameter whose every element is covered comes
/// back whole; one that no member holds completely (a gradient streamed from NVMe) is left out.
/// Collective over `group`: every member passes the same model.
checkpoint::NamedTensors assemble_gradients(const torch::nn::Module& model,
                                            const std::vector<checkpoint::OptimizerSlice>& slices,
                                            const dist::Group* group);

}  // namespace colossal::booster
