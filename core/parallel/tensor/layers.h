#pragma once
// The vocabulary-parallel pieces the one tensor-parallel layer family (parallel_linear.h,
// parallel_embedding.h) is built from:
//   padded_vocab / vocab_parallel_lookup  weight [V'/tp, dim] with V' the vocabulary padded to a
//                          multiple of 64 x tp; each rank looks up the ids in its range, zeros the
//                          rest, and the results are all-reduced.
//   vocab_parallel_cross_entropy  logits split by vocabulary [N, V'/tp]: max, sum of exp and the
//                          target logit are reduced across ranks; full logits are never gathered.
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

/// Mean cross entropy over targets != ignore_index; logits [N, V'/tp] are this rank's vocabulary
/// slice (rank r holds ids [r V'/tp, (r+1) V'/tp)). `divisor` > 0: the summed loss is divided by
/// it instead of by the number of targets here (a share of a mean over several ranks' rows).
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           const dist::Group& group, int64_t ignore_index = -100,
                                           double divisor = 0);

}  // namespace colossal::parallel
