#include "core/booster/booster.h"
#include "core/booster/full_gradients.h"

#include <torch/nn/utils/clip_grad.h>

#include "core/common/check.h"
#include "core/dist/comm_profile.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/data/model_sync.h"

namespace colossal::booster {

bool BoostedOptimizer::step() {
  const bool stepped = model_->optimizer_step(*inner_);
  dist::comm_profile::end_step();
  return stepped;
}

void ModelWrapper::set_gradient_sync(bool enabled) {
  COLOSSAL_CHECK(enabled, "[booster] plugin '", plugin_name_,
                 "' does not support no_sync (gradient accumulation without communication)");
}

double ModelWrapper::execute_pipeline(const parallel::pipeline::StageFunctions&, const std::vector<torch::Tensor>&,
                                      const std::vector<torch::Tensor>&) {
  COLOSSAL_FAIL("[booster] plugin '", plugin_name_, "' runs no pipeline: use --plugin hybrid with --pp > 1");
}

double ModelWrapper::evaluate_pipeline(const parallel::pipeline::StageFunctions&, const std::vector<torch::Tensor>&,
                                       const std::vector<torch::Tensor>&) {
  COLOSSAL_FAIL("[booster] plugin '", plugin_name_, "' runs no pipeline: use --plugin hybrid with --pp > 1");
}

double ModelWrapper::clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                    double norm_type) {
  std::vector<torch::Tensor> params;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) params.push_back(p);
  return torch::nn::utils::clip_grad_norm_(params, max_norm, norm_type);
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

NoSyncGuard::NoSyncGuard(ModelWrapper& model) : model_(model), previous_(model.gradient_sync()) {
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
  auto wrapper = plugin_->wrap_model(*model, *optimizer);
  auto boosted_opt = std::make_shared<BoostedOptimizer>(std::move(optimizer), wrapper.get());
  auto dtype = wrapper->compute_dtype();
  wrappers_.push_back(std::move(wrapper));
  if (sampler) {
    auto [rank, size] = plugin_->data_parallel_rank_and_size();
    sampler->shard(rank, size);
  }
  return Boosted{std::move(model), std::move(boosted_opt), std::move(lr_scheduler), dtype,
                 std::move(sampler)};
}

void Booster::backward(const torch::Tensor& loss, BoostedOptimizer& optimizer) {
  COLOSSAL_CHECK(loss.numel() == 1, "[booster] backward: expected a scalar loss, got shape ",
                 loss.sizes());
  auto& wrapper = optimizer.model_wrapper();
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
  NoSyncGuard guard(optimizer.model_wrapper());
  fn();
}

NoSyncGuard Booster::no_sync_guard(BoostedOptimizer& optimizer) {
  COLOSSAL_CHECK(plugin_->supports_no_sync(), "[booster] plugin '", plugin_->name(),
                 "' does not support no_sync");
  return NoSyncGuard(optimizer.model_wrapper());
}

double Booster::clip_grad_norm(BoostedOptimizer& optimizer, double max_norm, double norm_type) {
  COLOSSAL_CHECK(max_norm > 0, "[booster] clip_grad_norm: expected max_norm > 0, got ", max_norm);
  return optimizer.model_wrapper().clip_grad_norm(optimizer.inner(), max_norm, norm_type);
}

std::vector<checkpoint::OptimizerSlice> ModelWrapper::optimizer_slices(
    const torch::nn::Module& model) const {
  std::vector<checkpoint::OptimizerSlice> out;
  for (auto& [name, t] : full_model_state(model)) out.push_back({name, 0, t});
  return out;
}

checkpoint::NamedTensors ModelWrapper::full_gradients(const torch::nn::Module& model) const {
  return assemble_gradients(model, optimizer_slices(model), gradient_shard_group());
}

checkpoint::NamedTensors ModelWrapper::full_model_state(const torch::nn::Module& model) const {
  return checkpoint::model_state(model);
}

}  // namespace colossal::booster
