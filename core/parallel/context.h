#pragma once
// Where a model's tensor- and sequence-parallel communication goes: the groups a model is built
// with, taken from the job's layout (dist::ParallelDims, the one owner of the mesh). The default
// context (no groups) is a single process, and every parallel layer is then exactly its plain
// counterpart.
#include <string>

#include "core/dist/group.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/pipeline/layout.h"
#include "core/parallel/tensor/grid/tensor_grid.h"

namespace colossal::parallel {

using dist::SequenceParallelMode;
using dist::parse_sequence_parallel_mode;
using dist::to_string;

struct ParallelContext {
  dist::Group tp;  // not a member (default): no 1D tensor parallelism
  // 2D, 2.5D and 3D tensor parallelism: the grid of the tp ranks (tp is then left unset: the
  // layers take the grid's paths, and every 1D path stays off).
  TensorGrid grid;
  dist::Group sp;  // all_to_all and ring_attn: the sequence-parallel group
  dist::Group ep;  // expert parallelism: the ranks that share out a MoE layer's experts
  SequenceParallelMode sp_mode = SequenceParallelMode::kNone;
  /// Which stage of a pipeline the model builds (default: none, the whole model). Set by the
  /// plugin that runs the pipeline (it knows the schedule); from(dims) fills only the group.
  pipeline::PipelineLayout pipeline;

  /// The model-facing groups of a layout (creates them: collective, every rank calls it).
  static ParallelContext from(const dist::ParallelDims& dims);

  int tp_size() const { return tp.is_member() ? tp.size() : 1; }
  int tp_rank() const { return tp.is_member() ? tp.rank() : 0; }
  int sp_size() const;
  int sp_rank() const;
  int ep_size() const { return ep.is_member() ? ep.size() : 1; }
  bool tensor_parallel() const { return tp_size() > 1; }
  /// Layers split over a 2D, 2.5D or 3D grid of more than one rank.
  bool grid_parallel() const { return grid.parallel(); }
  /// The group the sequence is sharded over (tp for split_gather, sp otherwise); may be unset.
  const dist::Group& sequence_group() const;
};

}  // namespace colossal::parallel
