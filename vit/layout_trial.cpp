#include "vit/layout_trial.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "vit/model.h"
#include "vit/pipeline.h"

namespace colossal::vit {

namespace {

// Random normalised images and labels, the same on the ranks of a replica.
std::pair<torch::Tensor, torch::Tensor> random_batch(const ViTConfig& c, int64_t images, uint64_t seed) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(seed + 17);
  auto pixels = at::randn({images, c.num_channels, c.image_size, c.image_size}, g, torch::kFloat);
  auto labels = at::randint(c.num_labels, {images}, g, torch::kInt64);
  return {pixels, labels};
}

}  // namespace

bool layout_is_valid(const ViTConfig& config, const tools::Layout& l, int world) {
  if (l.pp == 1 && l.micro_batch != l.replica_batch) return false;
  return tools::layout_satisfies(l, world, [&](const dist::ParallelDims& dims) { check_parallel(config, dims); });
}

double time_training_steps(const ViTConfig& config, const tools::Layout& l, const booster::PluginConfig& base,
                           const tools::TrialOptions& o) {
  auto plugin = booster::make_plugin(tools::plugin_config_for(l, base));
  check_parallel(config, plugin->dims());
  torch::manual_seed(o.seed);
  ViTForImageClassification model{nullptr};
  {
    nn::DeferredInitGuard deferred;
    model = ViTForImageClassification(config, plugin->parallel_context());
  }
  model->set_gradient_checkpointing(l.activation_checkpointing);
  if (!nn::has_deferred_parameters(*model)) model->to(plugin->device());
  auto optimizer = optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), optimizer);
  const auto& pipeline = model->parallel_context().pipeline;
  tools::TrialModel trial;
  trial.stage = stage_functions(model);
  trial.loss = [&](const torch::Tensor& pixels, const torch::Tensor& labels) {
    return trial.stage.loss(model->forward(pixels), labels);
  };
  trial.microbatches = pipeline.enabled() ? pipeline.microbatches_for(l.replica_batch) : 0;
  auto [pixels, labels] = random_batch(config, l.replica_batch, o.seed);
  return tools::time_optimizer_steps(booster, b, l, trial, pixels.to(plugin->device()), labels.to(plugin->device()), o);
}

void calibrate_compute(const ViTConfig& config, int64_t images, const tools::MachineRates& rates, tools::SearchSpace& space) {
  ViTConfig slice = config;
  slice.num_hidden_layers = 2;
  images = std::max<int64_t>(images, 1);
  // Forward and backward of the slice built under `parallel` on `replicas` x images, without and
  // with checkpointing.
  auto time = [&](const parallel::ParallelContext& parallel, int replicas) {
    torch::manual_seed(0);
    ViTForImageClassification model(slice, parallel);
    model->train();
    const auto fns = stage_functions(model);
    auto [pixels, labels] = random_batch(slice, images * replicas, 0);
    return tools::time_with_and_without_checkpointing([&](bool on) { model->set_gradient_checkpointing(on); }, [&] {
      model->zero_grad();
      fns.loss(model->forward(pixels), labels).backward();
    });
  };
  const auto [plain, checkpointed] = time({}, 1);
  const auto spec = model_spec(slice);
  const auto slowest = tools::calibrate_from_slice(spec, images, spec.patches, plain, checkpointed, rates, space);
  tools::calibrate_model_parallel([&](const tools::Layout& l) { return layout_is_valid(slice, l, dist::world_size()); },
                                  time, slowest.first, space);
}

}  // namespace colossal::vit
