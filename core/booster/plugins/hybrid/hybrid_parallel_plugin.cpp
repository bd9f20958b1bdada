#include "core/booster/plugins/hybrid/hybrid_parallel_plugin.h"

#include <torch/torch.h>

#include "core/amp/precision.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/common/check.h"
#include "core/dist/runtime.h"
#include "core/parallel/expert/experts.h"
#include "core/parallel/tensor/shard.h"
#include "core/booster/plugins/low_level_zero/low_level_zero_plugin.h"

namespace colossal::booster {
void HybridParallelPlugin::Options::validate() const {
  COLOSSAL_CHECK(zero_stage >= 0 && zero_stage <= 2, "[hybrid] zero_stage: expected 0, 1 or 2, got ", zero_stage,
                 " (ZeRO-3 is the gemini plugin)");
  COLOSSAL_CHECK(bucket_bytes >= 0, "[hybrid] bucket_mib: expected > 0 (or 0: the data-parallel wrapper's own)");
  COLOSSAL_CHECK(communication_dtype.empty() || zero_stage > 0, "[hybrid] communication_dtype '", communication_dtype,
                 "' is ZeRO's (zero_stage 1 or 2); DDP reduces in the working dtype");
  COLOSSAL_CHECK(!cpu_offload || zero_stage > 0, "[hybrid] cpu_offload is ZeRO's (zero_stage 1 or 2); under DDP "
                 "every rank keeps its whole state where it computes");
  COLOSSAL_CHECK(!find_unused_parameters || zero_stage == 0, "[hybrid] find_unused_parameters is DDP's "
                 "(zero_stage 0); ZeRO always reduces parameters that got no gradient");
  COLOSSAL_CHECK(num_microbatches >= 0, "[hybrid] num_microbatches: expected >= 0 (0: pp x num_model_chunks), got ",
                 num_microbatches);
  (void)parallel::pipeline::parse_schedule(pp_schedule);
  (void)parallel::pipeline::parse_balance(pp_balance);
  COLOSSAL_CHECK(microbatch_size >= 0, "[hybrid] microbatch_size: expected >= 0, got ", microbatch_size);
  COLOSSAL_CHECK(microbatch_size == 0 || num_microbatches == 0, "[hybrid] num_microbatches ", num_microbatches,
                 " and microbatch_size ", microbatch_size, ": give one of them (the batch size sets the other)");
  (void)amp::parse_precision(precision);
}

parallel::pipeline::ScheduleOptions HybridParallelPlugin::Options::schedule(int pp) const {
  return {.kind = pp_schedule,
          .stages = pp,
          .microbatches = num_microbatches > 0 ? num_microbatches : pp * num_model_chunks,
          .chunks = num_model_chunks,
          .costs = {}};  // unit costs; the runner re-plans zbh1/zbv from measured ones
}

HybridParallelPlugin::HybridParallelPlugin(Options options, PluginEnvironment env)
    : Plugin(std::move(env)), options_(std::move(options)) {
  options_.validate();
  // The schedule is checked against the layout now, before any group or model exists.
  if (dims().pp() > 1) options_.schedule(dims().pp()).validate();
}

parallel::ParallelContext HybridParallelPlugin::parallel_context() {
  if (!context_) {
    context_ = parallel::ParallelContext::from(dims());
    if (dims().pp() > 1) {
      context_->pipeline.schedule = options_.schedule(dims().pp());
      context_->pipeline.balance = parallel::pipeline::parse_balance(options_.pp_balance);
      context_->pipeline.microbatch_size = options_.microbatch_size;
    }
  }
  return *context_;
}

std::unique_ptr<ModelWrapper> HybridParallelPlugin::wrap_model(torch::nn::Module& model,
                                                               torch::optim::Optimizer& optimizer) {
  const auto context = parallel_context();
  const int tp = dims().tp();
  const auto specs = parallel::collect_shard_specs(model);
  // A model built without the layout's groups would silently train as tp copies of itself.
  COLOSSAL_CHECK(tp == 1 || !specs.empty(), "[hybrid] tp ", tp,
                 ": the model holds no tensor-parallel slices; build it with plugin.parallel_context()");
  parallel::DataParallelScope scope;
  scope.group = dims().gradient_group();
  scope.gradient_divisor = dims().dp();
  if (dims().pp() > 1) scope.pipeline_group = context.pipeline.group;
  if (tp > 1) {
    scope.norm_group = context.grid_parallel() ? context.grid.group() : context.tp;
    for (const auto& [name, spec] : specs) {
      if (spec.dim < 0) continue;
      scope.split_over_norm_group.insert(name);
      if (spec.replicas.is_member() && spec.replicas.size() > 1) scope.block_replicas[name] = spec.replicas;
    }
  }
  // Expert parallelism: each ep rank holds other experts (their gradients are reduced over the
  // replicas holding the same ones, their norms summed over ep).
  const auto experts = parallel::expert::expert_parameter_names(model);
  const int ep = dims().ep();
  if (ep > 1) {
    COLOSSAL_CHECK(!experts.empty(), "[hybrid] ep ", ep, ": the model holds no experts; build a mixture-of-experts "
                   "model with plugin.parallel_context()");
    scope.expert_group = dims().expert_gradient_group();
    // DDP ranks hold whole experts, so a norm adds the other ep ranks'. ZeRO's norm already sums
    // over the whole data-parallel group, where every rank holds other shards of the experts.
    if (options_.zero_stage == 0) scope.expert_norm_group = context.ep;
    scope.expert_parameters = experts;
  }
  PluginEnvironment inner_env{shared_dims(), device()};
  std::unique_ptr<ModelWrapper> inner;
  if (options_.zero_stage == 0) {
    DDPPlugin::Options o;
    o.precision = options_.precision;
    if (options_.bucket_bytes > 0) o.bucket_bytes = options_.bucket_bytes;
    o.loss_scaler = options_.loss_scaler;
    o.find_unused_parameters = options_.find_unused_parameters;
    o.broadcast_buffers = options_.broadcast_buffers;
    o.scope = scope;
    inner = DDPPlugin(o, inner_env).wrap_model(model, optimizer);
  } else {
    LowLevelZeroPlugin::Options o;
    o.stage = options_.zero_stage;
    o.precision = options_.precision;
    if (options_.bucket_bytes > 0) o.bucket_bytes = options_.bucket_bytes;
    o.communication_dtype = options_.communication_dtype;
    o.cpu_offload = options_.cpu_offload;
    o.loss_scaler = options_.loss_scaler;
    o.scope = scope;
    inner = LowLevelZeroPlugin(o, inner_env).wrap_model(model, optimizer);
  }
  // After the inner wrap (mixed precision may replace the parameters): gradients that each rank
  // computes only in part (kv heads kept whole, norms on sequence shards) are summed over tp
  // before the data-parallel reduction sees them.
  parallel::register_partial_gradient_hooks(model);
  // The data-parallel wrapper's hooks and state store, with this layout's split of the model.
  ModelSplit split;
  split.tp_specs = specs;
  split.tp = tp;
  split.tp_rank = context.grid_parallel() ? context.grid.group().rank() : context.tp_rank();
  split.dp_rank = dims().coord(dist::Axis::kDp);
  if (dims().pp() > 1) split.pipeline = context.pipeline.group;
  if (ep > 1) {
    split.ep = context.ep;
    split.experts = experts;
    split.edp_rank = dims().coord(dist::Axis::kEdp);
  }
  auto layout = inner->checkpoint().with_split(std::move(split));
  layout.exchange_names(model);
  std::unique_ptr<PipelineStep> pipeline;
  if (dims().pp() > 1) pipeline = std::make_unique<PipelineStep>(context.pipeline);
  return std::make_unique<ModelWrapper>("hybrid", inner->shared_hooks(), std::move(layout), std::move(pipeline));
}

}  // namespace colossal::booster
