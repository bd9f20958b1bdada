#pragma once
// An embedding that applies the vocabulary-parallel rule: with tp ranks each holds rows
// [r V'/tp, (r+1) V'/tp) of the table padded to V' (a multiple of 64 x tp), looks up the ids in
// its range and the partial results are all-reduced. Without tensor parallelism it is exactly
// torch::nn::Embedding (same initialisation, same lookup). Parameter name: "weight".
#include <torch/nn/module.h>

#include "core/parallel/context.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::parallel {

class ParallelEmbeddingImpl : public torch::nn::Module, public ShardedModule {
 public:
  ParallelEmbeddingImpl(int64_t vocab, int64_t dim, const ParallelContext& ctx);
  torch::Tensor forward(const torch::Tensor& ids);
  std::map<std::string, ShardSpec> shard_specs() const override;
  int64_t vocab() const { return vocab_; }
  torch::Tensor weight;

 private:
  ParallelContext ctx_;
  int64_t vocab_, start_ = 0;
};
TORCH_MODULE(ParallelEmbedding);

}  // namespace colossal::parallel
