#include "llama/layout_trial.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/optim/factory.h"
#include "llama/model.h"
#include "llama/parallelize.h"
#include "llama/pipeline.h"
#include "llama/shapes.h"

namespace colossal::llama {

namespace {

dist::ParallelDims::Options parallel_options(const tools::Layout& l) {
  return {.pp = l.pp, .dp = l.dp, .sp = l.sp, .tp = l.tp, .ep = l.ep, .sp_mode = l.sp_mode};
}

}  // namespace

bool layout_is_valid(const LlamaConfig& config, const tools::Layout& l, int world, int64_t sequence) {
  try {
    dist::ParallelDims dims(parallel_options(l), world);
    check_parallel(config, dims, sequence);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

booster::PluginConfig plugin_config_for(const tools::Layout& l, const booster::PluginConfig& base) {
  booster::PluginConfig c;
  c.device = base.device;
  c.precision = l.precision;
  c.name = l.plugin;
  if (l.plugin == "hybrid") {
    c.layout = parallel_options(l);
    c.options["zero_stage"] = l.zero_stage;
    if (l.pp > 1) c.options["num_microbatches"] = l.replica_batch / std::max<int64_t>(l.micro_batch, 1);
  }
  if (l.plugin == "gemini" && l.offload != "none") {
    c.options["placement"] = "static";
    c.options["offload_optim_frac"] = 1.0;
    c.options["offload_device"] = l.offload;
  }
  return c;
}

double time_training_steps(const LlamaConfig& config, const tools::Layout& l, const booster::PluginConfig& base,
                           const TrialOptions& o) {
  auto plugin = booster::make_plugin(plugin_config_for(l, base));
  const auto& dims = plugin->dims();
  check_parallel(config, dims, o.sequence);
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
  const auto stage = stage_functions(model);
  // Random tokens, the same on the ranks of a replica.
  auto g = torch::make_generator<at::CPUGeneratorImpl>(o.seed + 17);
  auto ids = at::randint(config.vocab_size, {l.replica_batch, o.sequence}, g, torch::kInt64).to(plugin->device());
  std::vector<double> times;
  for (int s = 0; s < o.warmup_steps + o.steps; ++s) {
    dist::barrier(dist::world_group());
    const auto t0 = std::chrono::steady_clock::now();
    b.optimizer->zero_grad();
    if (pipeline.enabled()) {
      const int64_t m = pipeline.microbatches_for(l.replica_batch);
      auto parts = ids.split(l.replica_batch / m);
      booster.execute_pipeline(*b.optimizer, stage, parts, parts);
    } else {
      for (int64_t start = 0; start < l.replica_batch; start += l.micro_batch) {
        auto part = ids.narrow(0, start, std::min(l.micro_batch, l.replica_batch - start));
        auto run = [&] { booster.backward(model->loss(part, part), *b.optimizer); };
        if (start + l.micro_batch < l.replica_batch) booster.no_sync(*b.optimizer, run);
        else run();
      }
    }
    b.optimizer->step();
    auto t = torch::tensor({std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}, torch::kFloat64);
    dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kMax);
    if (s >= o.warmup_steps) times.push_back(t.item<double>());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void calibrate_compute(const LlamaConfig& config, int64_t tokens, const tools::MachineRates& rates, tools::SearchSpace& space) {
  LlamaConfig slice = config;
  slice.num_hidden_layers = 2;
  slice.vocab_size = 256;
  slice.tie_word_embeddings = false;
  const int64_t seq = std::min<int64_t>(space.sequence, std::max<int64_t>(tokens, 1));
  const int64_t batch = std::max<int64_t>(1, tokens / std::max<int64_t>(seq, 1));
  torch::manual_seed(0);
  LlamaForCausalLM model(slice);
  model->train();
  auto ids = torch::randint(0, slice.vocab_size, {batch, seq});
  auto time = [&](bool ckpt) {
    model->set_gradient_checkpointing(ckpt);
    std::vector<double> times;
    for (int i = 0; i < 4; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      model->zero_grad();
      model->loss(ids, ids).backward();
      if (i > 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
  };
  auto t = torch::tensor({time(false), time(true)}, torch::kFloat64);
  dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kMax);
  const double plain = t[0].item<double>(), ckpt = t[1].item<double>();
  // The FLOP count of the same slice at the rate of its shapes.
  const auto spec = model_spec(slice);
  const double rate = rates.matmul_curve.empty() ? rates.matmul_flops : rates.matmul_rate(batch * seq, 1);
  const double predicted = tools::flops_per_token(spec, seq).training * batch * seq / std::max(rate, 1.0);
  space.compute_scale = predicted > 0 ? plain / predicted : 1.0;
  space.checkpoint_factor = plain > 0 ? ckpt / plain : 4.0 / 3.0;
}

}  // namespace colossal::llama
