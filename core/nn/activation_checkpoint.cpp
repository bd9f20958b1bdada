#include "core/nn/activation_checkpoint.h"

#include <torch/autograd.h>
#include <torch/custom_class.h>

namespace colossal::nn {
namespace {

// The block travels to backward inside the context's saved data (a capsule).
struct BlockHolder : torch::CustomClassHolder {
  explicit BlockHolder(Block b) : block(std::move(b)) {}
  Block block;
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor input,
                               c10::intrusive_ptr<BlockHolder> holder) {
    ctx->save_for_backward({input});
    ctx->saved_data["block"] = c10::IValue::make_capsule(holder);
    torch::NoGradGuard no_grad;  // nothing inside is recorded
    return holder->block(input);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto input = ctx->get_saved_variables()[0];
    auto holder = ctx->saved_data["block"].toCapsule();
    auto* block = static_cast<BlockHolder*>(holder.get());
    auto x = input.detach().requires_grad_(input.requires_grad());
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = block->block(x);
    }
    // Accumulates into the block's parameters (their hooks fire as usual) and into x.
    torch::autograd::backward({y}, {grads[0]});
    return {x.requires_grad() ? x.grad() : torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor checkpoint(Block block, const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled()) return block(input);
  // The input must carry a gradient edge for the Function to be recorded at all; the first
  // block sees embeddings, which do (through the embedding weight).
  return CheckpointFunction::apply(input, c10::make_intrusive<BlockHolder>(std::move(block)));
}

}  // namespace colossal::nn
