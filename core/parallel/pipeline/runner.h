#pragma once
// PipelineRunner: runs one training step of a Schedule on this pipeline rank — for each step in
// the rank's order it receives what the step needs, runs the model chunk's forward or backward,
// and sends what it produced — and accumulates the chunk parameters' gradients as one backward
// over the whole batch would (each microbatch's loss divided by the microbatch count).
//
// The model is given as functions, so any model that can run a range of its layers plugs in:
// `forward(chunk, input)` runs this rank's model chunk `chunk` (on virtual stage 0 the input is
// the microbatch's own input, elsewhere the previous stage's output), `loss(output, target)`
// turns the last virtual stage's output into the microbatch's loss, `parameters(chunk)` lists the
// chunk's trainable parameters (the split schedules' W step computes their gradients).
//
// Split backward (zbh1, zbv): the forward runs under nn::DeferWeightGradients, so B walks the
// graph once, computing the chunk input's gradient (sent upstream at once) and the gradients of
// parameters outside linear layers, and frees it; the linear layers' dW GEMMs wait in a
// weight-gradient store (core/nn/weight_gradient_store.h) for W, which computes and accumulates
// them with the rest. A model whose layers use nn::linear (or ParallelLinear) splits its work
// that way; any other op's parameter gradients are computed in B and merely accumulated in W.
#include <torch/types.h>

#include <functional>
#include <array>
#include <vector>

#include "core/dist/group.h"
#include "core/parallel/pipeline/p2p.h"
#include "core/parallel/pipeline/schedule.h"

namespace colossal::parallel::pipeline {

struct StageFunctions {
  std::function<torch::Tensor(int chunk, const torch::Tensor& input)> forward;
  std::function<torch::Tensor(const torch::Tensor& output, const torch::Tensor& target)> loss;
  std::function<std::vector<torch::Tensor>(int chunk)> parameters;
  /// Optional: called with true just before the step that gives a chunk's parameters their last
  /// gradient of this run, and with false right after (a data-parallel wrapper reduces the
  /// accumulated gradients then, once per parameter, overlapping the rest of the schedule).
  std::function<void(bool)> gradient_sync;
  /// The loss is multiplied by this before backward (fp16 loss scaling).
  double loss_scale = 1.0;
};

/// What a rank did during one step, for timelines and tests.
struct StepRecord {
  Step step;
  double start_s = 0, end_s = 0;  // since the run began; start is after the step's input arrived
};

class PipelineRunner {
 public:
  /// `group`: the pipeline group, its ranks in stage order (group rank r runs stage r).
  PipelineRunner(Schedule schedule, dist::Group group);

  /// One step. `inputs` (the microbatches' inputs) are read on the rank holding virtual stage 0,
  /// `targets` on the rank holding the last; other ranks may pass empty vectors. Returns the
  /// step's loss (the mean over microbatches) on every rank of the group.
  double run(const StageFunctions& model, const std::vector<torch::Tensor>& inputs,
             const std::vector<torch::Tensor>& targets);

  /// Forward only (evaluation, no gradients): every microbatch through every virtual stage, in
  /// (microbatch, stage) order; returns the mean loss on every rank. Any microbatch count.
  double evaluate(const StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                  const std::vector<torch::Tensor>& targets);

  /// The order being run: for zbh1 and zbv after the third step, the one built from steps 2-3's
  /// measured costs (ScheduleOptions::costs) when it simulates faster than the unit-cost order.
  const Schedule& schedule() const { return schedule_; }
  /// This rank's steps of the last run, with their times.
  const std::vector<StepRecord>& timeline() const { return timeline_; }
  /// Most microbatch-chunks whose activations were held at once in the last run.
  int peak_live() const { return peak_live_; }

 private:
  void replan_from_measured_costs();

  Schedule schedule_;
  StageLink link_;
  int rank_;
  std::vector<StepRecord> timeline_;
  int peak_live_ = 0;
  int runs_ = 0;  // steps run; zbh1/zbv re-plan after the third from steps 2-3's costs
  std::array<double, 3> cost_sum_{}, cost_count_{};  // F, B, W seconds and counts over those steps
};

}  // namespace colossal::parallel::pipeline
