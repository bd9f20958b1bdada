#pragma once
// LayerNorm over the residual stream's features, for models whose norms are plain LayerNorms
// (ViT): whole on one process and under 1D tensor parallelism (the weight replicated, LibTorch's
// layer_norm in the input's dtype), and on a 2D, 2.5D or 3D grid the stream's feature block
// (grid_layer_norm: statistics all-reduced along the grid's rows of features, weight and bias held
// as the feature block, replicated over the row blocks). The parameters are `weight` and `bias`,
// as torch::nn::LayerNorm's, so checkpoints keep their names.
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <map>
#include <string>

#include "core/parallel/context.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::parallel {

class ParallelLayerNormImpl : public torch::nn::Module, public ShardedModule {
 public:
  ParallelLayerNormImpl(int64_t features, double eps, const ParallelContext& ctx);
  torch::Tensor forward(const torch::Tensor& x);
  std::map<std::string, ShardSpec> shard_specs() const override;

  torch::Tensor weight, bias;

 private:
  int64_t features_;
  double eps_;
  ParallelContext ctx_;
};
TORCH_MODULE(ParallelLayerNorm);

}  // namespace colossal::parallel
