#include "core/parallel/context.h"

namespace colossal::parallel {

ParallelContext ParallelContext::from(const dist::ParallelDims& dims) {
  ParallelContext c;
  c.sp_mode = dims.sp_mode();
  // Groups only for axes that split something: an unset group means "not parallel".
  if (dims.tp() > 1) {
    if (dims.tp_mode() == dist::TensorParallelMode::k1d)
      c.tp = dims.group(dist::Axis::kTp);
    else
      c.grid = TensorGrid::create(dims.group(dist::Axis::kTp), dims.tp_mode(), dims.options().tp_depth);
  }
  if (dims.sp() > 1) c.sp = dims.group(dist::Axis::kSp);
  if (dims.ep() > 1) c.ep = dims.group(dist::Axis::kEp);
  if (dims.pp() > 1) {
    c.pipeline.group = dims.group(dist::Axis::kPp);
    c.pipeline.schedule.stages = dims.pp();
  }
  if (dims.options().fp8_communication) {
    // Tagged handles: the layers' activation exchanges over them carry FP8 (fp8_payload.h).
    if (c.tp.is_member()) c.tp = c.tp.with_fp8_payloads();
    if (c.sp.is_member()) c.sp = c.sp.with_fp8_payloads();
    if (c.ep.is_member()) c.ep = c.ep.with_fp8_payloads();
    if (c.pipeline.group.is_member()) c.pipeline.group = c.pipeline.group.with_fp8_payloads();
    c.grid = c.grid.with_fp8_payloads();
  }
  return c;
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
