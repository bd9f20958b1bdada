#pragma once
// Where this rank sits in a pipeline, as a model needs it to build its stage: the pipeline group,
// the schedule's shape (stages, chunks per rank, the V of zbv) and, from them, which decoder
// layers each of the rank's model chunks holds and whether it holds the embedding (virtual
// stage 0) or the head and loss (the last). The default is no pipeline: one stage holding all.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/dist/group.h"
#include "core/parallel/pipeline/schedule.h"
#include "core/parallel/pipeline/stage_split.h"

namespace colossal::parallel::pipeline {

/// How layers are shared among the virtual stages: equal counts, or equal cost with the
/// embedding and the head counted (the model says what its pieces cost).
enum class Balance { kCount, kCost };
Balance parse_balance(const std::string& name);  // "count" | "cost"

struct PipelineLayout {
  dist::Group group;          // not a member (default): no pipeline
  ScheduleOptions schedule;   // stages, microbatches, chunks, kind
  Balance balance = Balance::kCost;
  int64_t microbatch_size = 0;  // samples per microbatch; 0: schedule.microbatches per step

  bool enabled() const { return schedule.stages > 1; }
  int rank() const { return group.is_member() ? group.rank() : 0; }
  int chunks() const { return schedule.chunks; }
  int virtual_stages() const { return schedule.stages * schedule.chunks; }
  int virtual_stage(int chunk) const { return virtual_stage_of(schedule, rank(), chunk); }
  /// [begin, end) decoder layers of each of this rank's chunks, out of `layers`: by `costs` (one
  /// per layer, and the ends') under Balance::kCost, by count otherwise or without costs.
  std::vector<std::pair<int64_t, int64_t>> layer_ranges(int64_t layers, const StageCosts& costs = {}) const;
  /// Microbatches in a step of `batch_size` samples (per data-parallel rank): schedule.microbatches,
  /// or batch_size / microbatch_size. Throws naming the flags when they do not divide or the
  /// count does not suit the schedule.
  int64_t microbatches_for(int64_t batch_size) const;
  bool holds_first() const;  // the embedding: virtual stage 0 is one of this rank's chunks
  bool holds_last() const;   // norm, head and loss: the last virtual stage is
  /// The chunk running virtual stage 0 / the last one (-1: not on this rank).
  int chunk_of_first() const;
  int chunk_of_last() const;
};

}  // namespace colossal::parallel::pipeline
