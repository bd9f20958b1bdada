#pragma once
// Where this rank sits in a pipeline, as a model needs it to build its stage: the pipeline group,
// the schedule's shape (stages, chunks per rank, the V of zbv) and, from them, which decoder
// layers each of the rank's model chunks holds and whether it holds the embedding (virtual
// stage 0) or the head and loss (the last). The default is no pipeline: one stage holding all.
#include <cstdint>
#include <utility>
#include <vector>

#include "core/dist/group.h"
#include "core/parallel/pipeline/schedule.h"

namespace colossal::parallel::pipeline {

struct PipelineLayout {
  dist::Group group;          // not a member (default): no pipeline
  ScheduleOptions schedule;   // stages, microbatches, chunks, kind
  std::vector<double> layer_costs;  // measured per-layer costs (empty: split by count)

  bool enabled() const { return schedule.stages > 1; }
  int rank() const { return group.is_member() ? group.rank() : 0; }
  int chunks() const { return schedule.chunks; }
  int virtual_stages() const { return schedule.stages * schedule.chunks; }
  int virtual_stage(int chunk) const { return virtual_stage_of(schedule, rank(), chunk); }
  /// [begin, end) decoder layers of each of this rank's chunks, out of `layers`.
  std::vector<std::pair<int64_t, int64_t>> layer_ranges(int64_t layers) const;
  bool holds_first() const;  // the embedding: virtual stage 0 is one of this rank's chunks
  bool holds_last() const;   // norm, head and loss: the last virtual stage is
  /// The chunk running virtual stage 0 / the last one (-1: not on this rank).
  int chunk_of_first() const;
  int chunk_of_last() const;
};

}  // namespace colossal::parallel::pipeline
