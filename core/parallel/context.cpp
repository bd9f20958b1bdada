#include "core/parallel/context.h"

#include "core/common/check.h"

namespace colossal::parallel {

const char* to_string(SequenceParallelMode mode) {
  switch (mode) {
    case SequenceParallelMode::kNone: return "none";
    case SequenceParallelMode::kSplitGather: return "split_gather";
    case SequenceParallelMode::kAllToAll: return "all_to_all";
    case SequenceParallelMode::kRingAttn: return "ring_attn";
  }
  return "?";
}

SequenceParallelMode parse_sequence_parallel_mode(const std::string& name) {
  if (name == "none" || name.empty()) return SequenceParallelMode::kNone;
  if (name == "split_gather") return SequenceParallelMode::kSplitGather;
  if (name == "all_to_all") return SequenceParallelMode::kAllToAll;
  if (name == "ring_attn") return SequenceParallelMode::kRingAttn;
  COLOSSAL_FAIL("[parallel] sequence-parallel mode '", name, "': expected none, split_gather, all_to_all or ring_attn");
}

const dist::Group& ParallelContext::sequence_group() const {
  return sp_mode == SequenceParallelMode::kSplitGather ? tp : sp;
}

int ParallelContext::sp_size() const {
  if (sp_mode == SequenceParallelMode::kNone) return 1;
  const auto& g = sequence_group();
  return g.is_member() ? g.size() : 1;
}

int ParallelContext::sp_rank() const {
  if (sp_mode == SequenceParallelMode::kNone) return 0;
  const auto& g = sequence_group();
  return g.is_member() ? g.rank() : 0;
}

}  // namespace colossal::parallel
