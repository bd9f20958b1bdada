#pragma once
// A pipeline-parallel training step on top of a plugin's step hooks: the schedule runs the
// microbatches with gradient synchronisation off, switching it on for each chunk's last backward
// (so the data-parallel reduction overlaps the rest of the schedule).
#include <optional>
#include <vector>

#include "core/booster/step_hooks.h"
#include "core/parallel/pipeline/layout.h"
#include "core/parallel/pipeline/runner.h"

namespace colossal::booster {

class PipelineStep {
 public:
  explicit PipelineStep(parallel::pipeline::PipelineLayout layout);
  /// One step of the schedule over inputs.size() (first stage) or targets.size() (last stage)
  /// microbatches; returns the mean loss on every rank.
  double train(StepHooks& hooks, const parallel::pipeline::StageFunctions& model,
               const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);
  /// The forward only (evaluation): the mean loss over the microbatches, on every rank.
  double evaluate(const parallel::pipeline::StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                  const std::vector<torch::Tensor>& targets);

 private:
  parallel::pipeline::PipelineLayout layout_;
  std::optional<parallel::pipeline::PipelineRunner> runner_;
};

}  // namespace colossal::booster
