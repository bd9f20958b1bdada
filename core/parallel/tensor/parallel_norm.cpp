#include "core/parallel/tensor/parallel_norm.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/nn/deferred_init.h"
#include "core/parallel/tensor/grid/grid_layers.h"

namespace colossal::parallel {

ParallelLayerNormImpl::ParallelLayerNormImpl(int64_t features, double eps, const ParallelContext& ctx)
    : features_(features), eps_(eps), ctx_(ctx) {
  int64_t local = features;
  if (ctx.grid_parallel()) {
    const int parts = ctx.grid.stream().feature_parts();
    COLOSSAL_CHECK(features % parts == 0, "[tp] tp_mode ", dist::to_string(ctx.grid.mode()), ": a layer norm over ",
                   features, " features does not divide into the grid's ", parts, " feature blocks");
    local /= parts;
  }
  const bool deferred = nn::deferred_init_enabled();
  weight = register_parameter("weight", deferred ? nn::deferred_empty({local}) : torch::ones({local}));
  bias = register_parameter("bias", deferred ? nn::deferred_empty({local}) : torch::zeros({local}));
}

torch::Tensor ParallelLayerNormImpl::forward(const torch::Tensor& x) {
  if (ctx_.grid_parallel()) return grid_layer_norm(x, weight, bias, eps_, ctx_.grid.stream());
  return torch::layer_norm(x, {features_}, weight, bias, eps_);
}

std::map<std::string, ShardSpec> ParallelLayerNormImpl::shard_specs() const {
  if (!ctx_.grid_parallel()) return {};
  const auto& grid = ctx_.grid;
  const auto s = grid_shard_spec(grid.feature_block(grid.stream()), {features_});
  return {{"weight", s}, {"bias", s}};
}

}  // namespace colossal::parallel
