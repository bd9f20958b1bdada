#pragma once
// The grid of 2D, 2.5D and 3D tensor parallelism: the tp ranks laid out as q x q (2D),
// q x q x d (2.5D) or q x q x q (3D), and the groups the layers communicate over.
//
// Activations are split over the grid both by rows (tokens of the batch) and by features, so no
// rank holds a whole activation (1D keeps them whole on every rank). An ActivationLayout names
// the two groups that describe such a split: `features` (the ranks holding the same rows, each a
// block of the features, in block order) and `rows` (the ranks holding the same feature block,
// each a block of the batch, in block order).
//
// Ranks within the tp group (its group rank t):
//   2D / 2.5D   t = k q^2 + r q + c     row r, column c, depth layer k (2D: k = 0)
//               layout: features over the row group (r, *, k) (block c); batch over the ranks
//               (*, c, *) in the order (k, r) (block k q + r).
//   3D          t = a q^2 + b q + c     the cube's coordinates (a, b, c)
//               two layouts, which linear layers alternate between (3D matrix multiplication
//               moves the feature split from one axis to the other):
//                 A  (the residual stream): features over axis c, batch over (a, b) (block a q + b)
//                 B  (inside attention and the MLP): features over axis b, batch over (a, c)
//
// A default TensorGrid is one process (every group of size one, every layer its dense self).
#include <string>

#include "core/dist/group.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::parallel {

using dist::TensorParallelMode;

struct ActivationLayout {
  dist::Group features;  // not a member (default): the features are whole
  dist::Group rows;      // not a member (default): the batch is whole
  int feature_parts() const { return features.is_member() ? features.size() : 1; }
  int feature_index() const { return features.is_member() ? features.rank() : 0; }
  int row_parts() const { return rows.is_member() ? rows.size() : 1; }
  int row_index() const { return rows.is_member() ? rows.rank() : 0; }
};

/// How one linear layer of the grid communicates (grid_linear in grid_layers.h):
///   gather the input over `input_gather` along `input_dim` (2D: features; 3D: rows),
///   gather the weight ([out, in], Hugging Face's layout) over `weight_gather` along `weight_dim`,
///   multiply, and reduce-scatter the product over `output_scatter` along rows (3D only).
/// Backward reduce-scatters each gradient over the group its tensor was gathered over.
struct GridLinearComm {
  dist::Group input_gather;
  int64_t input_dim = -1;
  dist::Group weight_gather;
  int64_t weight_dim = 1;
  dist::Group output_scatter;   // not a member: the product is complete (2D, 2.5D)
  dist::Group weight_replicas;  // 2.5D: the depth layers, whose weight gradients are summed
  ActivationLayout in, out;
};

/// Where a parameter's local block sits in the full tensor: per cut dimension, how many blocks it
/// is cut into, which one this rank holds, and the group whose rank order is the blocks' order
/// (an all-gather over it along the dimension rebuilds it). `replicas`: the ranks holding the
/// same block, whose gradients each cover part of the batch and are summed.
struct GridBlock {
  struct Cut {
    int dim = 0;
    int parts = 1, index = 0;
    dist::Group group;
  };
  std::vector<Cut> cuts;
  dist::Group replicas;
};

/// A block as the checkpoint and initialisation code see a split parameter: `shape` is the padded
/// full shape; `real_rows`, when smaller than shape[0], the real size of dimension 0 (a vocabulary
/// padded to the grid; the padding sits at the end of the last blocks). No cuts: not split.
ShardSpec grid_shard_spec(const GridBlock& block, const std::vector<int64_t>& shape, int64_t real_rows = -1);

class TensorGrid {
 public:
  TensorGrid() = default;
  /// Lays the members of `tp` out as the mode's grid and creates its groups (collective over the
  /// tp group; every member calls it). Throws when tp's size is not the grid's (tensor_grid_shape).
  static TensorGrid create(const dist::Group& tp, TensorParallelMode mode, int depth = 1);

  TensorParallelMode mode() const { return mode_; }
  int q() const { return q_; }
  int depth() const { return depth_; }
  int size() const { return size_; }
  bool parallel() const { return size_ > 1; }
  /// The whole tensor-parallel group (not a member on a default grid).
  const dist::Group& group() const { return all_; }

  /// The residual stream's layout (what embeddings produce and norms read).
  const ActivationLayout& stream() const { return stream_; }
  /// A column layer (q, k, v, gate, up, the head) reads the stream and writes `inner()`; a row
  /// layer (o, down) reads `inner()` and writes the stream. 2D and 2.5D: both are the stream.
  const ActivationLayout& inner() const { return inner_; }
  const GridLinearComm& linear(bool column) const { return column ? column_ : row_; }

  /// The block of a linear weight [out, in] / its bias [out] (out padded to `out_padded` when the
  /// layer is a vocabulary head).
  GridBlock weight_block(bool column) const;
  GridBlock bias_block(bool column) const;
  /// How many blocks a linear layer's output features are stored in (2D: q; 3D: q^2): a layer's
  /// output size must divide by it (a vocabulary head is padded to it).
  int weight_out_parts() const { return weight_out_parts_; }
  int weight_in_parts() const { return q_; }
  /// A norm's weight [features] in a layout: the layout's feature block, replicated over its rows.
  GridBlock feature_block(const ActivationLayout& layout) const;
  /// The vocabulary-parallel embedding [V', hidden]: the vocabulary cut over the stream's row
  /// group (the ranks that also share the ids), the hidden size over its feature group.
  GridBlock embedding_block() const;
  /// The embedding with only the hidden size split: [V, hidden / q], replicated over the rows.
  GridBlock hidden_embedding_block() const;

  /// "2d grid 2x2 (row 1, column 0)"
  std::string describe() const;

  /// The same grid whose linear layers gather activations with FP8 payloads (--fp8_communication;
  /// the weight gathers and reductions keep exact handles).
  TensorGrid with_fp8_payloads() const;

 private:
  TensorParallelMode mode_ = TensorParallelMode::k1d;
  int q_ = 1, depth_ = 1, size_ = 1, weight_out_parts_ = 1;
  int coord_[3] = {0, 0, 0};
  ActivationLayout stream_, inner_;
  GridLinearComm column_, row_;
  dist::Group axis_[3];  // 3D: axes a, b, c; 2D/2.5D: row (r,*,k), column (*,c,k), depth (r,c,*)
  dist::Group weight_rows_[2];  // 3D: the planes a weight's rows are cut over (column, row layers)
  dist::Group all_;             // the whole tp group
};

}  // namespace colossal::parallel
