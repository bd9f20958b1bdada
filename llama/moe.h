#pragma once
// Mixtral's sparse MoE block, in Hugging Face's checkpoint layout:
//   model.layers.N.block_sparse_moe.gate.weight            router [experts, hidden]
//   model.layers.N.block_sparse_moe.experts.E.w1.weight    gate projection [intermediate, hidden]
//   model.layers.N.block_sparse_moe.experts.E.w3.weight    up projection   [intermediate, hidden]
//   model.layers.N.block_sparse_moe.experts.E.w2.weight    down projection [hidden, intermediate]
// (what transformers' save_pretrained writes for MixtralForCausalLM). Routing, dispatch and
// expert parallelism are core's (core/parallel/expert); this file is the model's part: which
// experts a rank builds (its ep share, under their global names), each expert a SwiGLU whose
// projections follow the tensor-parallel plan like the dense MLP's.
#include <torch/nn/module.h>

#include "core/parallel/apply_plan.h"
#include "core/parallel/expert/dispatch.h"
#include "core/parallel/expert/router.h"
#include "core/parallel/tensor/parallel_linear.h"
#include "llama/config.h"

namespace colossal::llama {

class ExpertImpl : public torch::nn::Module {
 public:
  ExpertImpl(const LlamaConfig& config, const parallel::PlanBuilder& where);
  /// This rank's part of the expert on rows [n, hidden]: under tensor parallelism a partial sum
  /// (the block reduces every expert's output at once).
  torch::Tensor partial_forward(const torch::Tensor& rows);
  parallel::ParallelLinear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(Expert);

class SparseMoeBlockImpl : public torch::nn::Module {
 public:
  SparseMoeBlockImpl(const LlamaConfig& config, const parallel::PlanBuilder& where);
  /// x [B, T, hidden] -> [B, T, hidden]; the routing is added to `losses` when given.
  torch::Tensor forward(const torch::Tensor& x, parallel::expert::RouterLosses* losses = nullptr);

  parallel::ParallelLinear gate{nullptr};
  std::vector<Expert> experts;  // this rank's, registered as experts.E (global index)
  const parallel::expert::ExpertPlacement& placement() const { return placement_; }
  const parallel::expert::RouterOptions& router() const { return router_; }

 private:
  parallel::ParallelContext parallel_;
  parallel::expert::ExpertPlacement placement_;
  parallel::expert::RouterOptions router_;
  double jitter_ = 0;
};
TORCH_MODULE(SparseMoeBlock);

}  // namespace colossal::llama
