#include "core/parallel/tensor/parallel_embedding.h"

#include <torch/torch.h>

#include "core/nn/deferred_init.h"
#include "core/common/check.h"
#include "core/parallel/tensor/grid/grid_layers.h"
#include "core/parallel/tensor/layers.h"
#include "core/parallel/tensor/parallel_linear.h"

namespace colossal::parallel {

ParallelEmbeddingImpl::ParallelEmbeddingImpl(int64_t vocab, int64_t dim, const ParallelContext& ctx)
    : ctx_(ctx), vocab_(vocab) {
  if (ctx_.grid_parallel()) {
    // A block of the table: the vocabulary (padded) over the stream's row group, the hidden size
    // over its feature group.
    const auto& stream = ctx_.grid.stream();
    COLOSSAL_CHECK(dim % stream.feature_parts() == 0, "[tp] tp_mode ", dist::to_string(ctx_.grid.mode()),
                   ": embedding width ", dim, " does not divide into the grid's ", stream.feature_parts(),
                   " feature blocks");
    const int64_t rows = padded_vocab(vocab, stream.row_parts()) / stream.row_parts();
    start_ = stream.row_index() * rows;
    weight = register_parameter("weight", nn::deferred_empty({rows, dim / stream.feature_parts()}));
  } else {
    // This rank's rows of the table padded to a multiple of 64 x tp, without memory yet.
    const int64_t rows = ctx_.tensor_parallel() ? padded_vocab(vocab, ctx_.tp_size()) / ctx_.tp_size() : vocab;
    start_ = ctx_.tp_rank() * rows;
    weight = register_parameter("weight", nn::deferred_empty({rows, dim}));
  }
  if (nn::deferred_init_enabled()) return;  // the model initialises it when boosted
  torch::NoGradGuard no_grad;
  auto full = torch::empty({vocab, dim}).normal_();  // torch::nn::Embedding's initialisation
  weight.set_data(local_part(full, split_spec(shard_specs(), "weight"), weight));
}

torch::Tensor ParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  if (ctx_.grid_parallel()) return grid_vocab_embedding(ids, weight, ctx_.grid.stream());
  if (!ctx_.tensor_parallel()) return torch::embedding(weight, ids);
  return leave_tensor_parallel(vocab_parallel_partial_lookup(weight, ids, start_), ctx_);
}

std::map<std::string, ShardSpec> ParallelEmbeddingImpl::shard_specs() const {
  std::map<std::string, ShardSpec> out;
  if (ctx_.grid_parallel()) {
    const auto& stream = ctx_.grid.stream();
    out["weight"] = grid_shard_spec(ctx_.grid.embedding_block(),
                                    {weight.size(0) * stream.row_parts(), weight.size(1) * stream.feature_parts()},
                                    vocab_);
    return out;
  }
  if (!ctx_.tensor_parallel()) return out;
  ShardSpec s;
  s.group = ctx_.tp;
  s.dim = 0;
  s.full_size = vocab_;
  s.local_start = start_;
  s.local_size = std::clamp<int64_t>(vocab_ - start_, 0, weight.size(0));
  out["weight"] = s;
  return out;
}

}  // namespace colossal::parallel
