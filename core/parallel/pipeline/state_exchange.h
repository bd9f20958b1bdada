#pragma once
// Model state across pipeline stages: each stage holds other parameters, and a checkpoint holds
// them all (the one Hugging Face layout). These move names and tensors over the pipeline group.
#include <ATen/core/Tensor.h>

#include <string>
#include <utility>
#include <vector>

#include "core/dist/group.h"

namespace colossal::parallel::pipeline {

using NamedState = std::vector<std::pair<std::string, at::Tensor>>;

/// Every rank's names, on every rank (collective over `group`).
std::vector<std::string> all_names(const dist::Group& group, const std::vector<std::string>& mine);

/// The group's first rank gets every rank's tensors after its own (CPU copies, in stage
/// order); the other ranks send theirs and get their own back. Collective over `group`.
NamedState gather_to_first(const dist::Group& group, NamedState mine);

}  // namespace colossal::parallel::pipeline
