#pragma once
// Optimizer state as named tensors, keyed by the model's parameter names, so it is independent
// of how parameters were grouped, split or in which process they live:
//   "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.step"   (Adam, AdamW, FusedAdamW)
//   "<param>.momentum_buffer"                                   (SGD with momentum)
//
// Layouts on disk (a checkpoint directory holds one):
//   replicated: optimizer.safetensors (or sharded by size with an index), full-shape tensors,
//               written once by rank 0 (DDP and single-process training);
//   sliced:     optimizer/rank-R.safetensors, one per rank, each holding 1-D slices of the
//               flattened state (ZeRO); metadata "offset.<param>" says where each slice starts
//               and "world_size" how many files make the whole.
// OptimizerStateSource reads either, and any element range of any state tensor, so state saved
// under one layout loads under any other.
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/checkpoint/safetensors.h"

namespace colossal::checkpoint {

/// One tensor the optimizer updates, as a piece of a named parameter: elements
/// [offset, offset + tensor.numel()) of the flattened parameter (offset 0 and the full tensor
/// when it is not split).
struct OptimizerSlice {
  std::string name;
  int64_t offset = 0;
  at::Tensor tensor;
  int64_t full_numel = -1;  // elements of the whole parameter; -1: tensor.numel()
  // Under tensor parallelism the "parameter" above is this rank's part of a larger one, named
  // "<param>@tp<R>of<T>". Where that part sits in the whole parameter (written into the
  // checkpoint's metadata as "tp.<name>"), so state saved at one tp size loads at any other.
  // Empty whole_shape: the named parameter is the whole one.
  std::vector<int64_t> whole_shape;
  int split_dim = -1;        // -1: every tensor-parallel rank holds the whole parameter
  int64_t split_start = 0;   // the part's first row along split_dim
  int64_t split_size = 0;    // its real rows (the part may hold padding rows after them)
  // A second cut (2D/2.5D/3D tensor-parallel grids cut weights along two dimensions; never
  // padded), written as "tp2.<name>". -1: none.
  int split_dim2 = -1;
  int64_t split_start2 = 0, split_size2 = 0;
};

/// "<param>@tp<R>of<T>" -> "<param>"; other names unchanged.
std::string tensor_parallel_base(const std::string& name);

/// The optimizer's state for `slices` (full-shape tensors for whole parameters, 1-D otherwise)
/// and the metadata that locates sliced pieces ("offset.<param>" for every slice with offset
/// != 0 or a 1-D split tensor, "tp.<param>" for a tensor-parallel part).
NamedTensors optimizer_state(const torch::optim::Optimizer& optimizer,
                             const std::vector<OptimizerSlice>& slices,
                             std::map<std::string, std::string>* metadata = nullptr);

class OptimizerStateSource {
 public:
  /// Opens the optimizer state of checkpoint directory `dir` (either layout); throws naming what
  /// is missing (e.g. a rank file of a sliced checkpoint).
  explicit OptimizerStateSource(const std::string& dir);
  bool contains(const std::string& key) const { return pieces_.count(key) != 0; }
  /// Elements [offset, offset + numel) of the flattened state tensor `key`; throws when the
  /// saved pieces do not cover the range.
  at::Tensor read_range(const std::string& key, int64_t offset, int64_t numel) const;
  /// Elements of the whole (unsplit) state tensor `key`, as saved.
  int64_t saved_numel(const std::string& key) const;
  /// A per-parameter scalar (".step").
  at::Tensor read_scalar(const std::string& key) const;
  const std::string& layout() const { return layout_; }

  /// Whether any state of parameter `base` is held: whole, or as tensor-parallel parts.
  bool holds(const std::string& base) const;
  /// The whole parameter's state tensor `base` + `suffix` (".exp_avg"...): read as saved whole
  /// and viewed as `shape`, or assembled from the tensor-parallel parts of any tp size (their
  /// recorded geometry gives the shape). Throws naming a missing part.
  at::Tensor read_whole(const std::string& base, const std::string& suffix, const std::vector<int64_t>& shape) const;
  /// `base`'s ".step", from the whole or from any tensor-parallel part.
  at::Tensor read_step(const std::string& base) const;
  /// Whether `base` has tensor-parallel parts saved without their place in the whole (written
  /// before the places were recorded): they load only at the tp size they were saved with.
  bool saved_without_placement(const std::string& base) const { return unplaced_tp_.count(base) > 0; }

 private:
  struct Piece {
    std::shared_ptr<SafetensorsFile> file;
    std::string tensor;  // name inside the file
    int64_t offset = 0;
    int64_t numel = 0;
  };
  // One tensor-parallel part of a parameter as saved: its name ("<param>@tp<R>of<T>") and place.
  struct TpPart {
    std::string name;
    int split_dim = -1;
    int64_t split_start = 0, split_size = 0;
    int split_dim2 = -1;
    int64_t split_start2 = 0, split_size2 = 0;
    std::vector<int64_t> whole_shape;
  };
  std::string dir_, layout_;
  std::shared_ptr<CheckpointReader> replicated_;
  std::map<std::string, std::vector<Piece>> pieces_;
  std::map<std::string, std::map<int, TpPart>> tp_parts_;  // base parameter -> tp rank -> part
  std::map<std::string, int> tp_size_;                      // base parameter -> the tp size saved
  std::set<std::string> unplaced_tp_;                       // base parameters whose parts lack a place
};

/// Restores state into the optimizer's tensors `slices` from any layout (ZeRO slices, and
/// tensor-parallel parts of any tp size); throws naming a parameter whose state is missing,
/// incomplete or of another size, and when the checkpoint holds state but none of it fits.
void load_optimizer_state(torch::optim::Optimizer& optimizer,
                          const std::vector<OptimizerSlice>& slices,
                          const OptimizerStateSource& source);

}  // namespace colossal::checkpoint
