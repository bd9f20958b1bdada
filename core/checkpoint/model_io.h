#pragma once
// Model weights in the unsplit Hugging Face layout: full tensors named by their module path
// (named_parameters, then named_buffers), in one safetensors file or shards plus an index.
#include <torch/nn/module.h>

#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"

namespace colossal::checkpoint {

struct SaveModelOptions {
  bool shard = false;                          // numbered shards + index (else one file)
  int64_t size_per_shard = int64_t{5} << 30;   // bytes, when sharding
  std::optional<c10::ScalarType> dtype;        // convert floating tensors (default: as they are)
  void validate() const;                       // size_per_shard > 0 when sharding
};

struct LoadModelOptions {
  bool strict = true;  // every name present on both sides with the same shape
  /// Applied to the reader before anything is compared: a checkpoint in another layout
  /// presented under the model's names (CheckpointReader::derive / hide).
  std::function<void(CheckpointReader&)> adapt;
};

/// What load_model did besides copying: everything that differed.
struct LoadReport {
  std::vector<std::string> missing;     // in the model, not in the checkpoint
  std::vector<std::string> unexpected;  // in the checkpoint, not in the model
  std::vector<std::string> mismatched;  // "name: checkpoint [2, 3] F32, model [3, 2] F32"
  std::vector<std::string> converted;   // "name: BF16 -> F32"
  bool clean() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
  std::string describe() const;
};

/// The tensors save_model writes for `model`.
NamedTensors model_state(const torch::nn::Module& model);

/// Writes `tensors` into `dir` (created if needed); returns the files written.
std::vector<std::string> save_model_state(const NamedTensors& tensors, const std::string& dir,
                                          const SaveModelOptions& options = {});

/// Copies the checkpoint in `dir` into the model's parameters and buffers. Shapes must match;
/// floating dtypes are converted (reported). With strict, any missing, unexpected or mismatched
/// name is an error listing every difference at once, and nothing is copied; without it, what
/// matches is loaded and the report lists the rest.
LoadReport load_model_state(torch::nn::Module& model, const std::string& dir,
                            const LoadModelOptions& options = {});
/// The same into explicit targets (tensors that are written in place, e.g. fp32 masters).
/// `held_elsewhere`: checkpoint names another rank loads (pipeline stages), neither loaded here
/// nor reported unexpected.
LoadReport load_state_into(const NamedTensors& targets, const std::string& dir,
                           const LoadModelOptions& options = {}, const std::set<std::string>& held_elsewhere = {});

}  // namespace colossal::checkpoint
