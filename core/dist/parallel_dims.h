#pragma once
// ParallelDims: the one owner of a job's parallel layout. It holds the size of every axis,
// validates them once against the world size (messages show the arithmetic), builds the
// ProcessGroupMesh, and hands out groups by an enum. Plugins, models, the inference engine and
// the checkpoint code take a ParallelDims; nothing else builds a mesh.
//
// Vocabulary (torchtitan's): an *axis* is a mesh axis, a *dim* is a tensor dimension.
//
// The mesh, outermost first (tp innermost, so tensor-parallel peers are neighbouring ranks, as
// ColossalAI orders it):
//
//     pp  x  [ edp x ep ]  x  sp  x  tp
//            `--- dp ---'
//
// Expert parallelism is carved out of the data-parallel ranks (ColossalAI's moe_dp x ep): the dp
// replicas are split into ep groups that hold different experts; edp = dp / ep replicas hold the
// same experts. Dense parameters are reduced over dp, expert parameters over edp.
//
// Sequence parallelism: all_to_all (Ulysses) and ring_attn have their own sp axis; split_gather
// (Megatron) shards the sequence over the tensor-parallel ranks, so its sp axis is 1 and the
// sequence group is tp.
//
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/dist/group.h"
#include "core/dist/mesh.h"

namespace colossal::dist {

/// Groups a ParallelDims hands out.
enum class Axis {
  kPp,   // pipeline stages
  kDp,   // every data-parallel replica (edp x ep)
  kEdp,  // expert data parallel: replicas holding the same experts (dp / ep of them)
  kEp,   // expert parallel: ranks holding different experts
  kSp,   // the sequence-parallel axis (all_to_all, ring_attn)
  kTp,   // tensor parallel
};
const char* to_string(Axis axis);

enum class SequenceParallelMode {
  kNone,
  kSplitGather,  // Megatron: activations outside attention/MLP sharded by sequence over the tp group
  kAllToAll,     // Ulysses: sequence shards exchanged for head shards around attention (sp group)
  kRingAttn,     // ring attention over the sp group, zigzag sequence split
};
const char* to_string(SequenceParallelMode mode);
/// "none", "split_gather", "all_to_all", "ring_attn"; throws listing them otherwise.
SequenceParallelMode parse_sequence_parallel_mode(const std::string& name);

/// How tensor parallelism splits a layer over its tp ranks (ColossalAI's four):
///   1d   Megatron: weights split by rows or columns, activations whole on every rank
///   2d   a q x q grid (SUMMA/Optimus): weights and activations split over both grid axes
///   2.5d q x q x d (Tesseract): d layers of the 2D grid, each on its own share of the batch
///   3d   a q x q x q cube: weights and activations split over all three axes
enum class TensorParallelMode { k1d, k2d, k2p5d, k3d };
const char* to_string(TensorParallelMode mode);
/// "1d", "2d", "2.5d", "3d"; throws listing them otherwise.
TensorParallelMode parse_tensor_parallel_mode(const std::string& name);

/// The grid a tp size makes in a mode: q (the side) and the depth. 1d: q = tp, depth 1; 2d: tp =
/// q^2; 2.5d: tp = q^2 x depth; 3d: tp = q^3 (depth q). Throws naming what is not a square or cube.
struct TensorGridShape {
  int q = 1, depth = 1;
  // How many blocks a linear layer's output features are stored in: q (2d, 2.5d; 1d: tp), q^2
  // in 3d (the output's feature axis, then the cube's first axis).
  int weight_out_parts = 1;
};
TensorGridShape tensor_grid_shape(TensorParallelMode mode, int tp, int depth = 1);

class ParallelDims {
 public:
  /// The requested sizes, as a user gives them (flags --pp --dp --sp --tp --ep --sp_mode).
  struct Options {
    int pp = 1;
    int dp = 0;  // 0: what the world leaves (world / (pp x sp x tp))
    int sp = 1;  // sequence-parallel size (split_gather: 1 or tp; it uses the tp ranks)
    int tp = 1;
    int ep = 1;  // divides dp
    std::string sp_mode = "none";  // none | split_gather | all_to_all | ring_attn
    std::string tp_mode = "1d";    // 1d | 2d | 2.5d | 3d
    int tp_depth = 1;              // 2.5d: the depth d of a q x q x d grid (tp = q^2 d)
    // The activations (and their gradients) that tp, sp, ep and pp exchange travel as FP8 with
    // scales (ParallelContext tags its groups; parallel/fp8_payload.h).
    bool fp8_communication = false;

    /// Checks everything that needs no world size (each size, the mode's rules, unbuilt axes).
    void validate() const;
    /// "pp 1 x dp 2 x sp 1 x tp 2"
    std::string describe() const;
    bool operator==(const Options&) const = default;
  };

  /// Validates `options` against `world_size` (dist::world_size() when 0) and resolves dp.
  /// No communication: groups are created on first request.
  explicit ParallelDims(Options options, int world_size = 0);
  /// Pure data parallelism over the world (what the plain DDP/ZeRO plugins use).
  ParallelDims() : ParallelDims(Options{}) {}

  const Options& options() const { return options_; }
  int world_size() const { return world_; }
  /// Resolved sizes. sp is the size of the sp *axis* (1 under split_gather, which uses tp).
  int pp() const { return options_.pp; }
  int dp() const { return dp_; }
  int ep() const { return options_.ep; }
  int edp() const { return dp_ / options_.ep; }
  int sp() const { return sp_axis_; }
  int tp() const { return options_.tp; }
  int size(Axis axis) const;
  SequenceParallelMode sp_mode() const { return mode_; }
  TensorParallelMode tp_mode() const { return parse_tensor_parallel_mode(options_.tp_mode); }
  /// Ranks the sequence is sharded over (sp, or tp under split_gather; 1 without sp).
  int sequence_parallel_size() const;

  /// The pure arithmetic: axis names pp, edp, ep, sp, tp (every one present, size 1 included).
  const MeshLayout& layout() const { return layout_; }
  /// Members (global ranks, in group-rank order) of the group along `axes` containing `rank`.
  std::vector<int> group_ranks(std::initializer_list<Axis> axes, int rank) const;
  /// This process's coordinate on an axis (dp: edp coordinate x ep + ep coordinate).
  int coord(Axis axis) const;
  int coord(Axis axis, int rank) const;

  /// This rank's group along one axis or several (every rank must ask for the same groups in the
  /// same order: creating one is collective). A group spanning the world is the world group.
  Group group(Axis axis) const;
  Group group(std::initializer_list<Axis> axes) const;
  /// The group the sequence is sharded over (tp under split_gather); not a member without sp.
  Group sequence_group() const;
  /// The group data-parallel gradients are reduced over: dp, or dp x sp when sp has its own axis
  /// (each sp rank's gradients cover its own tokens, so they are summed over sp too).
  Group gradient_group() const;
  /// The same for expert parameters: the replicas holding the same experts (edp, x sp).
  Group expert_gradient_group() const;

  /// "pp 1 x dp 2 x sp 2 (ring_attn) x tp 2" (ep shown when > 1)
  std::string describe() const;

 private:
  std::vector<std::string> mesh_axes(std::initializer_list<Axis> axes) const;

  Options options_;
  int world_ = 1, dp_ = 1, sp_axis_ = 1, rank_ = 0;
  SequenceParallelMode mode_ = SequenceParallelMode::kNone;
  MeshLayout layout_;
  mutable std::optional<ProcessGroupMesh> mesh_;
};

}  // namespace colossal::dist
