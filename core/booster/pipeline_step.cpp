#include "core/booster/pipeline_step.h"

#include "core/common/check.h"

namespace colossal::booster {

PipelineStep::PipelineStep(parallel::pipeline::PipelineLayout layout) : layout_(std::move(layout)) {
  COLOSSAL_CHECK(layout_.enabled(), "[booster] a pipeline step needs pp > 1");
}

double PipelineStep::evaluate(const parallel::pipeline::StageFunctions& model,
                              const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  if (!runner_) runner_.emplace(parallel::pipeline::Schedule(layout_.schedule), layout_.group);
  return runner_->evaluate(model, inputs, targets);
}

double PipelineStep::train(StepHooks& hooks, const parallel::pipeline::StageFunctions& model,
                           const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  const int m = static_cast<int>(layout_.holds_first() ? inputs.size() : targets.size());
  auto options = layout_.schedule;
  options.microbatches = m;
  if (!runner_ || runner_->schedule().microbatches() != m)
    runner_.emplace(parallel::pipeline::Schedule(options), layout_.group);
  auto fns = model;
  fns.loss_scale = hooks.loss_scale();
  fns.gradient_sync = [&hooks](bool on) { hooks.set_gradient_sync(on); };
  hooks.before_backward();
  hooks.set_gradient_sync(false);
  double loss = 0;
  try {
    loss = runner_->run(fns, inputs, targets);
  } catch (...) {
    hooks.set_gradient_sync(true);
    throw;
  }
  hooks.set_gradient_sync(true);
  hooks.after_backward();
  return loss;
}

}  // namespace colossal::booster
