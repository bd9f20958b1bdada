#pragma once
// Where a model's tensor- and sequence-parallel communication goes. A model is built with a
// ParallelContext; the default one (no groups) is a single process, and every parallel layer is
// then exactly its plain counterpart.
#include <string>

#include "core/dist/group.h"

namespace colossal::parallel {

enum class SequenceParallelMode {
  kNone,
  kSplitGather,  // Megatron: activations outside attention/MLP sharded by sequence over the tp group
  kAllToAll,     // Ulysses: sequence shards exchanged for head shards around attention (sp group)
  kRingAttn,     // ring attention over the sp group, zigzag sequence split
};

const char* to_string(SequenceParallelMode mode);
/// "none", "split_gather", "all_to_all", "ring_attn"; throws listing them otherwise.
SequenceParallelMode parse_sequence_parallel_mode(const std::string& name);

struct ParallelContext {
  dist::Group tp;  // not a member (default): no tensor parallelism
  dist::Group sp;  // all_to_all and ring_attn: the sequence-parallel group
  SequenceParallelMode sp_mode = SequenceParallelMode::kNone;

  int tp_size() const { return tp.is_member() ? tp.size() : 1; }
  int tp_rank() const { return tp.is_member() ? tp.rank() : 0; }
  int sp_size() const;
  int sp_rank() const;
  bool tensor_parallel() const { return tp_size() > 1; }
  /// The group the sequence is sharded over (tp for split_gather, sp otherwise); may be unset.
  const dist::Group& sequence_group() const;
};

}  // namespace colossal::parallel
