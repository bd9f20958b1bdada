#pragma once
// The layers of 2D, 2.5D and 3D tensor parallelism as functions over local blocks (the grid and
// its layouts: tensor_grid.h). Each is its dense counterpart on a grid of one, and on a larger
// grid gives this rank's block of the dense result, with gradients that are this rank's block of
// the dense gradients. Activations are [rows, ..., features] with the batch as rows (dim 0).
//
//   grid_linear           y = x W^T + b over blocks. Forward gathers the input (2D: its feature
//                         blocks along the row; 3D: its row blocks) and the weight, multiplies,
//                         and (3D) reduce-scatters the partial product over rows. Only the local
//                         blocks are kept for backward, which gathers them again (SUMMA's and
//                         the 3D algorithm's memory: no rank keeps a whole activation). With an
//                         FP8 state (--mixed_precision fp8) the gathered input and weight are
//                         cast to e4m3 and the gathered output gradient to e5m2 before the
//                         products (amp/fp8_linear.h's recipe, a scale per gathered block);
//                         backward casts the re-gathered blocks with forward's scales.
//   grid_rms_norm         the mean square over features all-reduced over the layout's feature
//   grid_layer_norm       group (layer norm: the mean, then the variance about it).
//   grid_embedding        hidden split only: weight [V, hidden / parts], no communication.
//   grid_vocab_embedding  vocabulary and hidden split: weight [V' / rows, hidden / parts]. The ids
//                         of the layout's row group are gathered, each rank looks up those in its
//                         vocabulary range, and the partial rows are reduce-scattered back.
//   grid_cross_entropy    logits [rows, V' / parts]: the vocabulary-parallel cross entropy over
//                         the feature group; the mean is over every token of the grid, and every
//                         rank returns it (its gradient covers this rank's tokens).
// Parameters replicated over rows (biases, norm weights, the hidden-split table) have their
// gradients summed over the ranks holding them as backward produces them; 2.5D's weights are
// summed over the depth layers.
#include <torch/types.h>

#include <memory>

#include "core/amp/fp8_linear.h"
#include "core/parallel/tensor/grid/tensor_grid.h"

namespace colossal::parallel {

torch::Tensor grid_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          const GridLinearComm& comm, const std::shared_ptr<amp::Fp8LinearState>& fp8 = nullptr);
torch::Tensor grid_rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                            const ActivationLayout& layout);
torch::Tensor grid_layer_norm(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              double eps, const ActivationLayout& layout);
torch::Tensor grid_embedding(const torch::Tensor& ids, const torch::Tensor& weight, const ActivationLayout& layout);
torch::Tensor grid_vocab_embedding(const torch::Tensor& ids, const torch::Tensor& weight,
                                   const ActivationLayout& layout);
/// Logits of a vocabulary head whose outputs were padded to V': columns past `vocab` become -inf
/// (they never take probability).
torch::Tensor mask_padded_vocab(const torch::Tensor& logits, int64_t vocab, const ActivationLayout& layout);
torch::Tensor grid_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                 const ActivationLayout& layout, int64_t ignore_index = -100);

/// This rank's block of a full tensor (a copy), and the full tensor from every rank's block.
torch::Tensor take_block(const torch::Tensor& full, const GridBlock& block);
torch::Tensor gather_block(const torch::Tensor& local, const GridBlock& block);
/// This rank's block of a whole activation [rows, ..., features] (or of ids [rows, ...] with
/// `features` false), and the whole activation back from every rank's block.
torch::Tensor split_activation(const torch::Tensor& full, const ActivationLayout& layout, bool features = true);
torch::Tensor gather_activation(const torch::Tensor& local, const ActivationLayout& layout, bool features = true);

/// The same two with gradients, around a part of a model that every rank computes whole (ViT's
/// patch embeddings and classifier, from replicated parameters):
///   enter_grid  whole -> this rank's block; backward gathers the block gradients whole, so the
///               replicated parameters before it get their complete gradient on every rank
///   leave_grid  this rank's block -> whole on every rank; backward keeps the own block of the
///               whole gradient (every rank repeats the computation after it the same way)
torch::Tensor enter_grid(const torch::Tensor& full, const ActivationLayout& layout);
torch::Tensor leave_grid(const torch::Tensor& local, const ActivationLayout& layout);

}  // namespace colossal::parallel
