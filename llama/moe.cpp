#include "llama/moe.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/nn/module_hooks.h"
#include "core/nn/weight_gradient_store.h"
#include "core/parallel/expert/experts.h"

namespace colossal::llama {

ExpertImpl::ExpertImpl(const LlamaConfig& c, const parallel::PlanBuilder& where) {
  w1 = register_module("w1", where.at("w1").linear(c.hidden_size, c.intermediate_size, false));
  w2 = register_module("w2", where.at("w2").linear(c.intermediate_size, c.hidden_size, false));
  w3 = register_module("w3", where.at("w3").linear(c.hidden_size, c.intermediate_size, false));
}

torch::Tensor ExpertImpl::partial_forward(const torch::Tensor& rows) {
  // Each rank's product alone (not the layers' forward: a row-split w2 would all-reduce per
  // expert); the base may be quantized and carry an adapter (QLoRA on experts).
  return nn::run_hooked(*this, [&] {
    return w2->local_forward(torch::silu(w1->local_forward(rows)) * w3->local_forward(rows));
  });
}

SparseMoeBlockImpl::SparseMoeBlockImpl(const LlamaConfig& c, const parallel::PlanBuilder& where)
    : parallel_(where.parallel), jitter_(c.router_jitter_noise) {
  router_.num_experts = c.num_local_experts;
  router_.top_k = c.num_experts_per_tok;
  router_.capacity_factor = c.capacity_factor;
  router_.validate();
  placement_.num_experts = c.num_local_experts;
  placement_.ep = parallel_.ep;
  placement_.validate();
  gate = register_module("gate", where.at("gate").linear(c.hidden_size, c.num_local_experts, false));
  auto holder = register_module("experts", std::make_shared<parallel::expert::ExpertsModule>());
  for (int64_t e = placement_.first_local(); e < placement_.first_local() + placement_.local_count(); ++e) {
    experts.push_back(Expert(c, where.at("experts." + std::to_string(e))));
    holder->register_module(std::to_string(e), experts.back());
  }
}

torch::Tensor SparseMoeBlockImpl::forward(const torch::Tensor& x_in, parallel::expert::RouterLosses* losses) {
  auto x = x_in;
  if (is_training() && jitter_ > 0) x = x * torch::empty_like(x).uniform_(1.0 - jitter_, 1.0 + jitter_);
  const auto shape = x.sizes().vec();
  auto flat = x.reshape({-1, shape.back()});
  // The router reads the replicated activations (its gradient is whole on every tp rank); the
  // experts read them entered into the tensor-parallel region, like the dense MLP.
  auto routing = parallel::expert::route(nn::call(gate, flat), router_);
  if (losses) losses->add(routing);
  auto entered = parallel::enter_tensor_parallel(flat, parallel_);
  parallel::expert::LocalExperts local;
  local.run = [&](int64_t e, const torch::Tensor& rows) { return experts.at(e)->partial_forward(rows); };
  if (parallel_.tensor_parallel())
    local.finish = [&](const torch::Tensor& out) { return parallel::leave_tensor_parallel(out, parallel_); };
  return parallel::expert::dispatch_and_combine(entered, routing, placement_, local).view(shape);
}

}  // namespace colossal::llama
