#pragma once
// Hugging Face checkpoints for tensor-parallel models. Files always hold full tensors, so a
// checkpoint written at one tp size loads at any other (and into plain models):
//   full_model_state   every parameter and buffer whole (split ones all-gathered over their
//                      group; every member of each group must call it)
//   load_model_slices  each rank copies only its slice out of the memory-mapped files: the
//                      pages of the other ranks' rows are never read
#include <torch/nn/module.h>

#include <string>

#include "core/checkpoint/model_io.h"

namespace colossal::parallel {

checkpoint::NamedTensors full_model_state(const torch::nn::Module& model);

/// Like checkpoint::load_model_state, with every split parameter checked against the full shape
/// and filled with its slice (padding rows zeroed).
checkpoint::LoadReport load_model_slices(torch::nn::Module& model, const std::string& dir,
                                         const checkpoint::LoadModelOptions& options = {});

}  // namespace colossal::parallel
