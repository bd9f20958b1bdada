#pragma once
// How a parameter of a tensor-parallel model relates to the full (Hugging Face) tensor. Modules
// that hold slices describe them (ShardedModule); collect_shard_specs walks a model and names
// every described parameter by its full path. Saving gathers the full tensor, loading copies
// this rank's slice, gradient norms count each element once.
#include <torch/nn/module.h>

#include <map>
#include <string>

#include "core/dist/group.h"

namespace colossal::parallel {

struct ShardSpec {
  int dim = -1;            // the dimension split over `group`; -1: replicated across it
  int64_t full_size = 0;   // that dimension's size in the full tensor (before vocabulary padding)
  int64_t local_start = 0; // where this rank's slice starts in the full tensor
  int64_t local_size = 0;  // rows of the slice that are real (the rest is padding)
  dist::Group group;
  // A second split (2D, 2.5D and 3D grids cut weights along both dimensions, embeddings along the
  // vocabulary and the hidden size): dimension dim2 over group2, never padded. -1: none.
  int dim2 = -1;
  int64_t full_size2 = 0, local_start2 = 0, local_size2 = 0;
  dist::Group group2;
  // Grids: the tensor-parallel ranks holding this same block (each over its own rows of the
  // batch; the layers sum their gradients in backward). A gradient norm counts the block once.
  dist::Group replicas;
  // Replicated parameters whose gradient each rank only partly computes (GQA key/value
  // projections kept whole when there are fewer kv heads than tp; norms under split_gather):
  // the gradient is summed over the group.
  bool gradient_partial = false;
};

class ShardedModule {
 public:
  virtual ~ShardedModule() = default;
  /// Parameter name within the module ("weight", "bias") -> its spec.
  virtual std::map<std::string, ShardSpec> shard_specs() const = 0;
};

/// Every described parameter of `model`, by its full name ("model.layers.0.self_attn.q_proj.weight").
std::map<std::string, ShardSpec> collect_shard_specs(const torch::nn::Module& model);

/// This rank's slice of a full tensor (padded with zeros past full_size).
torch::Tensor slice_of(const torch::Tensor& full, const ShardSpec& spec, int64_t padded_local_size);

/// The spec of parameter `name` when it is split over its group (dim >= 0), else nullptr.
const ShardSpec* split_spec(const std::map<std::string, ShardSpec>& specs, const std::string& name);
/// The full (unsplit) shape of a parameter whose local tensor is `local`.
std::vector<int64_t> full_shape(const torch::Tensor& local, const ShardSpec* split);
/// This rank's part of `full`, shaped like `local`: a copy of its slice, or `full` itself when
/// the parameter is not split.
torch::Tensor local_part(const torch::Tensor& full, const ShardSpec* split, const torch::Tensor& local);

/// The full tensor from every rank's slice (all-gathered over spec.group, padding dropped); the
/// tensor itself when it is replicated.
torch::Tensor gather_full(const torch::Tensor& local, const ShardSpec& spec);

/// Hooks that sum the gradients of gradient_partial parameters over their group as backward
/// produces them (before any plugin's own gradient handling sees them). Returns how many.
int register_partial_gradient_hooks(torch::nn::Module& model);

}  // namespace colossal::parallel
