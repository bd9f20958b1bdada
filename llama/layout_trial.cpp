#include "llama/layout_trial.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "llama/model.h"
#include "llama/parallelize.h"
#include "llama/pipeline.h"
#include "llama/shapes.h"

namespace colossal::llama {

bool layout_is_valid(const LlamaConfig& config, const tools::Layout& l, int world, int64_t sequence) {
  return tools::layout_satisfies(l, world, [&](const dist::ParallelDims& dims) { check_parallel(config, dims, sequence); });
}

double time_training_steps(const LlamaConfig& config, const tools::Layout& l, const booster::PluginConfig& base,
                           const tools::TrialOptions& o) {
  auto plugin = booster::make_plugin(tools::plugin_config_for(l, base));
  check_parallel(config, plugin->dims(), o.sequence);
  auto parallel = plugin->parallel_context();
  torch::manual_seed(o.seed);
  LlamaForCausalLM model{nullptr};
  {
    nn::DeferredInitGuard deferred;
    model = LlamaForCausalLM(config, parallel);
  }
  model->set_gradient_checkpointing(l.activation_checkpointing);
  if (!nn::has_deferred_parameters(*model)) model->to(plugin->device());
  auto optimizer = optim::make_optimizer(*model, {.name = "fused_adamw", .lr = 1e-4});
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), optimizer);
  const auto& pipeline = model->parallel_context().pipeline;
  tools::TrialModel trial;
  trial.loss = [&](const torch::Tensor& ids, const torch::Tensor& labels) { return model->loss(ids, labels); };
  trial.stage = stage_functions(model);
  trial.microbatches = pipeline.enabled() ? pipeline.microbatches_for(l.replica_batch) : 0;
  // Random tokens, the same on the ranks of a replica.
  auto g = torch::make_generator<at::CPUGeneratorImpl>(o.seed + 17);
  auto ids = at::randint(config.vocab_size, {l.replica_batch, o.sequence}, g, torch::kInt64).to(plugin->device());
  return tools::time_optimizer_steps(booster, b, l, trial, ids, ids, o);
}

void calibrate_compute(const LlamaConfig& config, int64_t tokens, const tools::MachineRates& rates, tools::SearchSpace& space) {
  LlamaConfig slice = config;
  slice.num_hidden_layers = 2;
  slice.vocab_size = 256;
  slice.tie_word_embeddings = false;
  const int64_t seq = std::min<int64_t>(space.sequence, std::max<int64_t>(tokens, 1));
  const int64_t batch = std::max<int64_t>(1, tokens / std::max<int64_t>(seq, 1));
  // Forward and backward of the slice built under `parallel` on `replicas` x batch samples,
  // without and with checkpointing.
  auto time = [&](const parallel::ParallelContext& parallel, int replicas) {
    torch::manual_seed(0);
    LlamaForCausalLM model(slice, parallel);
    model->train();
    auto ids = torch::randint(0, slice.vocab_size, {batch * replicas, seq});
    return tools::time_with_and_without_checkpointing([&](bool on) { model->set_gradient_checkpointing(on); }, [&] {
      model->zero_grad();
      model->loss(ids, ids).backward();
    });
  };
  const auto [plain, checkpointed] = time({}, 1);
  const auto slowest = tools::calibrate_from_slice(model_spec(slice), batch, seq, plain, checkpointed, rates, space);
  tools::calibrate_model_parallel([&](const tools::Layout& l) { return layout_is_valid(slice, l, dist::world_size(), seq); },
                                  time, slowest.first, space);
}

}  // namespace colossal::llama
