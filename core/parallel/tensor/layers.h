#pragma once
// Tensor-parallel layers over a group of tp ranks; each is the plain layer when tp = 1.
//   ColumnParallelLinear   weight [out/tp, in]: each rank computes its slice of the outputs
//                          (optionally all-gathered); backward all-reduces the input gradient.
//   RowParallelLinear      weight [out, in/tp]: input already split by features; the partial
//                          products are all-reduced; the bias is added once, after.
//   VocabParallelEmbedding weight [V'/tp, dim] with V' the vocabulary padded to a multiple of
//                          64 x tp; each rank looks up the ids in its range, zeros the rest, and
//                          the results are all-reduced.
//   vocab_parallel_cross_entropy  logits split by vocabulary [N, V'/tp]: max, sum of exp and the
//                          target logit are reduced across ranks; full logits are never gathered.
// Parameters are named "weight" and "bias", holding this rank's slice of the Hugging Face tensor.
#include <torch/nn/module.h>

#include "core/dist/group.h"

namespace colossal::parallel {

/// Vocabulary padded to a multiple of 64 x tp (what VocabParallelEmbedding and the head use).
int64_t padded_vocab(int64_t vocab, int tp);

/// The vocabulary-parallel lookup: rows [start, start + weight.size(0)) live here; ids outside
/// them give zeros, and the partial results are all-reduced over `group`.
torch::Tensor vocab_parallel_lookup(const torch::Tensor& weight, const torch::Tensor& ids, int64_t start,
                                    const dist::Group& group);
/// The lookup before the reduction (what the ranks' results sum to).
torch::Tensor vocab_parallel_partial_lookup(const torch::Tensor& weight, const torch::Tensor& ids, int64_t start);

class ColumnParallelLinearImpl : public torch::nn::Module {
 public:
  ColumnParallelLinearImpl(int64_t in, int64_t out, dist::Group group, bool bias = false, bool gather_output = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  dist::Group group_;
  bool gather_output_;
};
TORCH_MODULE(ColumnParallelLinear);

class RowParallelLinearImpl : public torch::nn::Module {
 public:
  RowParallelLinearImpl(int64_t in, int64_t out, dist::Group group, bool bias = false);
  /// x: this rank's slice of the input features [..., in/tp].
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;

 private:
  dist::Group group_;
};
TORCH_MODULE(RowParallelLinear);

class VocabParallelEmbeddingImpl : public torch::nn::Module {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim, dist::Group group);
  torch::Tensor forward(const torch::Tensor& ids);
  int64_t vocab_start() const { return start_; }
  int64_t vocab_per_rank() const { return per_rank_; }
  torch::Tensor weight;

 private:
  dist::Group group_;
  int64_t start_, per_rank_;
};
TORCH_MODULE(VocabParallelEmbedding);

/// Mean cross entropy over targets != ignore_index; logits [N, V'/tp] are this rank's vocabulary
/// slice (rank r holds ids [r V'/tp, (r+1) V'/tp)).
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           const dist::Group& group, int64_t ignore_index = -100);

}  // namespace colossal::parallel
