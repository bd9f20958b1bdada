#include "core/booster/booster.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/common/check.h"
#include "core/dist/comm_profile.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/data/model_sync.h"
#include "core/parallel/tensor/parallel_linear.h"

namespace colossal::booster {

bool BoostedOptimizer::step() {
  const bool stepped = model_->hooks().optimizer_step(*inner_);
  dist::comm_profile::end_step();
  return stepped;
}

void StepHooks::set_gradient_sync(bool enabled) {
  COLOSSAL_CHECK(enabled, "[booster] plugin '", plugin_name_,
                 "' does not support no_sync (gradient accumulation without communication)");
}

double StepHooks::clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  return clip_local_gradients(optimizer, max_norm, norm_type);
}

double clip_local_gradients(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  torch::Tensor total;
  if (norm_type == 0) {
    total = torch::full({}, static_cast<double>(grads.size()));
  } else {
    // One fused pass over the gradients (one kernel per dtype and device, not one per tensor).
    auto norms = torch::_foreach_norm(grads, norm_type);
    total = norms.size() == 1 ? norms[0]
            : std::isinf(norm_type) ? torch::stack(norms).max()
                                    : torch::stack(norms).norm(norm_type);
  }
  const double norm = total.item<double>();
  // The coefficient as clip_grad_norm_ computes it (in the norm's dtype); a factor of 1 changes
  // no bit, so it is not applied: a step that does not clip reads the gradients once.
  auto coef = torch::clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  if (coef.item<double>() < 1.0) torch::_foreach_mul_(grads, coef);
  return norm;
}

ModelWrapper::ModelWrapper(std::string plugin_name, std::shared_ptr<StepHooks> hooks, CheckpointLayout checkpoint,
                           std::unique_ptr<PipelineStep> pipeline)
    : plugin_name_(std::move(plugin_name)),
      hooks_(std::move(hooks)), checkpoint_(std::move(checkpoint)), pipeline_(std::move(pipeline)) {
  COLOSSAL_CHECK(hooks_ != nullptr, "[booster] a wrapped model needs step hooks");
}

double ModelWrapper::execute_pipeline(const parallel::pipeline::StageFunctions& model,
                                      const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  COLOSSAL_CHECK(pipeline_, "[booster] plugin '", plugin_name(), "' runs no pipeline (pp = 1): use --plugin hybrid "
                 "with --pp > 1, or run forward and Booster::backward");
  return pipeline_->train(*hooks_, model, inputs, targets);
}

double ModelWrapper::evaluate_pipeline(const parallel::pipeline::StageFunctions& model,
                                       const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  COLOSSAL_CHECK(pipeline_, "[booster] plugin '", plugin_name(), "' runs no pipeline (pp = 1): use --plugin hybrid "
                 "with --pp > 1, or run the model's forward");
  return pipeline_->evaluate(model, inputs, targets);
}

std::shared_ptr<const dist::ParallelDims> Plugin::shared_dims() const {
  if (!dims_) {
    COLOSSAL_CHECK(dist::is_initialized(), "[booster] plugin '", name(), "': call colossal::dist::init() first");
    dims_ = env_.dims ? env_.dims : std::make_shared<const dist::ParallelDims>();
  }
  return dims_;
}

std::pair<int, int> Plugin::data_parallel_rank_and_size() const {
  return {dims().coord(dist::Axis::kDp), dims().dp()};
}

NoSyncGuard::NoSyncGuard(StepHooks& model) : model_(model), previous_(model.gradient_sync()) {
  model_.set_gradient_sync(false);
}
NoSyncGuard::~NoSyncGuard() { model_.set_gradient_sync(previous_); }

Booster::Booster(std::shared_ptr<Plugin> plugin) : plugin_(std::move(plugin)) {
  COLOSSAL_CHECK(plugin_ != nullptr, "[booster] Booster needs a plugin (make_plugin(\"ddp\"))");
}

Boosted Booster::boost(std::shared_ptr<torch::nn::Module> model,
                       std::shared_ptr<torch::optim::Optimizer> optimizer,
                       std::shared_ptr<optim::LRScheduler> lr_scheduler,
                       std::shared_ptr<data::DistributedSampler> sampler) {
  COLOSSAL_CHECK(model != nullptr && optimizer != nullptr,
                 "[booster] boost() needs a model and an optimizer");
  // A lazily built model: this rank's tensor-parallel slices are materialised now, unless the
  // plugin keeps only shards and materialises those itself.
  if (nn::has_deferred_parameters(*model) && !plugin_->materializes_deferred()) {
    // Every rank materialises from rank 0's seed (as an eager model is broadcast from it).
    parallel::broadcast_init_seed(*model, dist::world_group());
    nn::materialize(*model, plugin_->device());
  }
  if (plugin_->precision() == "fp8") {
    // The linear layers' products in FP8 (amp/fp8_linear.h); the rest runs as under bf16.
    const int layers = parallel::enable_fp8_linears(*model, plugin_->fp8_options());
    COLOSSAL_CHECK(layers > 0, "[booster] --mixed_precision fp8: the model has no linear layers built through its "
                   "parallel plan (parallel::ParallelLinear), so nothing would compute in FP8");
  }
  auto wrapper = plugin_->wrap_model(*model, *optimizer);
  boosted_models_.push_back(model.get());
  auto boosted_opt = std::make_shared<BoostedOptimizer>(std::move(optimizer), wrapper.get());
  auto dtype = wrapper->hooks().compute_dtype();
  wrappers_.push_back(std::move(wrapper));
  if (sampler) {
    auto [rank, size] = plugin_->data_parallel_rank_and_size();
    sampler->shard(rank, size);
  }
  return Boosted{std::move(model), std::move(boosted_opt), std::move(lr_scheduler), dtype,
                 std::move(sampler)};
}

peft::LoraLayers Booster::enable_lora(torch::nn::Module& model, const peft::LoraConfig& config,
                                     const std::vector<std::string>& exclude) {
  COLOSSAL_CHECK(std::find(boosted_models_.begin(), boosted_models_.end(), &model) == boosted_models_.end(),
                 "[booster] enable_lora after boost: the plugin has already laid out this model's parameters; call "
                 "enable_lora first, then build the optimizer and boost");
  return peft::enable_lora(model, config, exclude);
}

void Booster::backward(const torch::Tensor& loss, BoostedOptimizer& optimizer) {
  COLOSSAL_CHECK(loss.numel() == 1, "[booster] backward: expected a scalar loss, got shape ",
                 loss.sizes());
  auto& wrapper = optimizer.model_wrapper().hooks();
  wrapper.before_backward();
  double scale = wrapper.loss_scale();
  if (scale != 1.0) (loss * scale).backward();
  else loss.backward();
  wrapper.after_backward();
}

double Booster::execute_pipeline(BoostedOptimizer& optimizer, const parallel::pipeline::StageFunctions& model,
                                 const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  return optimizer.model_wrapper().execute_pipeline(model, inputs, targets);
}

double Booster::evaluate_pipeline(BoostedOptimizer& optimizer, const parallel::pipeline::StageFunctions& model,
                                  const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets) {
  return optimizer.model_wrapper().evaluate_pipeline(model, inputs, targets);
}

void Booster::no_sync(BoostedOptimizer& optimizer, const std::function<void()>& fn) {
  COLOSSAL_CHECK(plugin_->supports_no_sync(), "[booster] plugin '", plugin_->name(),
                 "' does not support no_sync");
  NoSyncGuard guard(optimizer.model_wrapper().hooks());
  fn();
}

NoSyncGuard Booster::no_sync_guard(BoostedOptimizer& optimizer) {
  COLOSSAL_CHECK(plugin_->supports_no_sync(), "[booster] plugin '", plugin_->name(),
                 "' does not support no_sync");
  return NoSyncGuard(optimizer.model_wrapper().hooks());
}

double Booster::clip_grad_norm(BoostedOptimizer& optimizer, double max_norm, double norm_type) {
  COLOSSAL_CHECK(max_norm > 0, "[booster] clip_grad_norm: expected max_norm > 0, got ", max_norm);
  return optimizer.model_wrapper().hooks().clip_grad_norm(optimizer.inner(), max_norm, norm_type);
}

}  // namespace colossal::booster
