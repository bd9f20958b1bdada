#pragma once
// A Linear layer that applies a parallel plan's rule: each rank holds its slice of the Hugging
// Face weight [out, in] under the same parameter names ("weight", "bias").
//   column     weight [out/tp, in]: input entered into the tp region (identity forward, gradient
//              all-reduced backward), output split by features (or all-gathered: gather_output)
//   row        weight [out, in/tp]: input split by features; partial products all-reduced; the
//              bias added once, after
//   vocab head column over the vocabulary padded to a multiple of 64 x tp; padded outputs are
//              -inf so they never take probability
//   replicate  the whole weight on every rank; with gradient_partial it sits inside the tp
//              region (GQA key/value heads kept whole when there are fewer than tp of them):
//              input entered like a column layer's, weight gradient summed over tp
// On a 2D, 2.5D or 3D grid (ctx.grid) column and row layers (and the head, padded to the grid)
// hold a block of the weight cut along both dimensions and run grid_linear (grid/grid_layers.h).
// With no tensor parallelism every style is exactly torch::nn::Linear (same initialisation,
// same forward). Initialisation draws the full tensor and keeps the slice, so a tp run starts
// from the weights of a single process with the same seed.
#include <torch/nn/module.h>

#include <string>

#include "core/amp/fp8_linear.h"
#include "core/nn/quantized_weight.h"
#include "core/parallel/context.h"
#include "core/parallel/plan.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::parallel {

struct ParallelLinearOptions {
  int64_t in_features = 0, out_features = 0;
  bool bias = false;
  SplitStyle style = SplitStyle::kReplicate;
  bool gather_output = false;
  bool gradient_partial = false;  // replicate inside the tp region
};

/// The input of column layers (and replicated layers inside the region): identity forward,
/// gradient all-reduced over tp. The caller enters once for all the column layers that read the
/// same input (q, k and v; gate and up), so backward all-reduces one gradient, not three.
/// Under split_gather the input is this rank's sequence shard and entering all-gathers it.
torch::Tensor enter_tensor_parallel(const torch::Tensor& x, const ParallelContext& ctx);

/// The partial sums a row layer produces: all-reduced, or under split_gather reduce-scattered
/// back to sequence shards.
torch::Tensor leave_tensor_parallel(const torch::Tensor& partial, const ParallelContext& ctx);

/// split_gather with more than one tensor-parallel rank: activations outside the attention and
/// MLP blocks are sequence shards over the tp group.
bool splits_sequence_over_tp(const ParallelContext& ctx);

/// A LoRA adapter's settings on one layer (nn/lora.h attaches adapters by name).
struct LoraAdapterOptions {
  int64_t rank = 8;
  double alpha = 16;          // scaling = alpha / rank
  double dropout = 0;         // on the adapter's input, in training
  std::string init = "kaiming";  // kaiming (PEFT's default) | gaussian | pissa
  uint64_t seed = 0;          // A's values come from (seed, the layer's full name), whatever the layout
};

/// While one is alive on this thread, layers with a LoRA adapter compute their base alone: the
/// model before its adapters, e.g. DPO's reference model under LoRA, with no second copy of the
/// weights. Nests.
class LoraDisabledGuard {
 public:
  LoraDisabledGuard();
  ~LoraDisabledGuard();
  LoraDisabledGuard(const LoraDisabledGuard&) = delete;
  LoraDisabledGuard& operator=(const LoraDisabledGuard&) = delete;

 private:
  bool previous_;
};
bool lora_disabled();

/// One adapter matrix as a module of its own ("lora_A.weight", "lora_B.weight": PEFT's names), so
/// ZeRO-3's hooks gather it like any parameter-owning module.
class LoraWeightImpl : public torch::nn::Module {
 public:
  explicit LoraWeightImpl(torch::Tensor w) { weight = register_parameter("weight", std::move(w)); }
  torch::Tensor weight;
};
TORCH_MODULE(LoraWeight);

class ParallelLinearImpl : public torch::nn::Module, public ShardedModule {
 public:
  ParallelLinearImpl(const ParallelLinearOptions& options, const ParallelContext& ctx);
  /// Column / region-replicated: x must have gone through enter_tensor_parallel; row: x is this
  /// rank's feature slice.
  torch::Tensor forward(const torch::Tensor& x);
  std::map<std::string, ShardSpec> shard_specs() const override;
  const ParallelLinearOptions& options() const { return options_; }
  /// Output features this rank computes (column: out/tp, padded for a vocabulary head).
  int64_t local_out_features() const {
    return grid_out_ > 0 ? grid_out_ : quantized_.defined() ? quantized_.rows() : weight.size(0);
  }
  /// Real (unpadded) outputs start here on this rank.
  int64_t out_start() const { return out_start_; }

  /// Attaches a LoRA adapter: y = W x + b + (alpha / rank) B A dropout(x), A [rank, in], B [out,
  /// rank] as full tensors, split like the base (column: B by rows, A whole with its gradient
  /// summed over tp; row: A by columns, B whole with its gradient summed). B starts at zero
  /// (kaiming, gaussian), or PiSSA takes the base's top singular directions into A and B and
  /// leaves W minus them (one process). `name`: the layer's full name (A's seed).
  void add_lora(const LoraAdapterOptions& options, const std::string& name);
  bool has_lora() const { return !lora_A.is_empty(); }
  double lora_scaling() const { return lora_scaling_; }
  /// W + scaling B A into the base weight (this rank's slice), the adapter removed.
  void merge_lora();

  /// QLoRA: keeps the frozen base weight quantized and dequantizes it piece by piece in forward
  /// and backward. `full`: the whole (unsplit) weight, or undefined to use `weight` (gathered
  /// over tensor parallelism). Under tp the whole matrix is quantized and this rank keeps its
  /// part, so the values equal one process's; where the split does not fall on block boundaries
  /// (QuantizedWeight::part_is_exact) the slice is quantized on its own, and says so. `weight` is
  /// left an empty [0] tensor (frozen): the values live in quantized(), and the layer's
  /// full-precision state is gone (a merged model is written from the original checkpoint:
  /// colossal merge).
  void quantize_base(nn::QuantizedWeight::Format format, const torch::Tensor& full = {});
  const nn::QuantizedWeight& quantized() const { return quantized_; }
  /// FP8 products from now on (amp/fp8_linear.h): the input and weight in e4m3, the output
  /// gradient in e5m2, each with its own scale. Not on a quantized base or a grid (yet).
  void enable_fp8(const amp::Fp8LinearOptions& options);
  bool fp8() const { return fp8_ != nullptr; }

  /// This rank's product alone, with no communication: x W^T over its slice (the bias but on a
  /// row layer, whose output here is a partial sum), plus the adapter's term. For layers whose
  /// owner combines the ranks' parts itself (a mixture's experts, reduced once after all of them).
  torch::Tensor local_forward(const torch::Tensor& x);

  torch::Tensor weight, bias;
  LoraWeight lora_A{nullptr}, lora_B{nullptr};

 private:
  // This rank's slice bounds and parameter shapes, registered without memory (what deferred
  // init keeps; the eager constructor then fills them from the full tensors).
  void lay_out(int tp, int tp_rank);

  /// y plus the adapter's term for this rank's input x (before any reduction of a row layer).
  torch::Tensor plus_lora(const torch::Tensor& y, const torch::Tensor& x);
  /// x W^T (+ b): the full-precision weight, or the quantized base.
  torch::Tensor base(const torch::Tensor& x, const torch::Tensor& b);

  ParallelLinearOptions options_;
  ParallelContext ctx_;
  double lora_scaling_ = 0, lora_dropout_ = 0;
  int64_t out_start_ = 0;
  int64_t grid_out_ = 0;  // 2D/2.5D/3D: the output features this rank computes (its weight holds fewer rows in 3D)
  torch::Tensor pad_mask_;  // vocab head: true on this rank's padded outputs
  nn::QuantizedWeight quantized_;
  std::shared_ptr<amp::Fp8LinearState> fp8_;
};
TORCH_MODULE(ParallelLinear);

/// Switches every ParallelLinear of `model` but vocabulary heads to FP8 (--mixed_precision fp8:
/// the head keeps the model's precision, as Transformer Engine's recipes do); returns how many.
int enable_fp8_linears(torch::nn::Module& model, const amp::Fp8LinearOptions& options);

}  // namespace colossal::parallel
