#include "core/nn/activation_checkpoint.h"

#include <torch/autograd.h>
#include <torch/custom_class.h>

#include "core/nn/weight_gradient_store.h"

namespace colossal::nn {
namespace {

// The block travels to backward inside the context's saved data (a capsule).
// Also the weight-gradient store in force at forward (split backward, weight_gradient_store.h).
struct BlockHolder : torch::CustomClassHolder {
  BlockHolder(Block b, WeightGradientStore* s) : block(std::move(b)), store(s) {}
  Block block;
  WeightGradientStore* store;
};

// A leaf that requires a gradient, passed beside inputs that do not (a frozen embedding's output
// under LoRA): autograd records a Function only when some input carries a gradient edge, and the
// block's own trainable parameters (adapters) are invisible to it. It gets no gradient.
torch::Tensor gradient_anchor() {
  static thread_local torch::Tensor anchor = torch::zeros({1}).requires_grad_(true);
  return anchor;
}

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor input,
                               c10::intrusive_ptr<BlockHolder> holder, torch::Tensor /*anchor*/) {
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
      DeferWeightGradients defer(block->store);
      y = block->block(x);
    }
    if (!y.requires_grad()) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};  // nothing inside trains
    if (!block->store) {
      // Accumulates into the block's parameters (their hooks fire as usual) and into x.
      torch::autograd::backward({y}, {grads[0]});
      return {x.requires_grad() ? x.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    // Split backward: x's gradient now; the parameters' gradients (those the recomputed linears
    // did not defer themselves) go to the store for W, so none is accumulated during B.
    std::vector<torch::Tensor> wrt;
    if (x.requires_grad()) wrt.push_back(x);
    const auto leaves = graph_leaves(y);
    for (const auto& leaf : leaves)
      if (!leaf.is_same(x)) wrt.push_back(leaf);
    auto got = torch::autograd::grad({y}, wrt, {grads[0]}, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
    const size_t first_leaf = x.requires_grad() ? 1 : 0;
    for (size_t i = first_leaf; i < wrt.size(); ++i)
      if (got[i].defined()) block->store->add(wrt[i], [g = got[i]] { return g; });
    return {first_leaf ? got[0] : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

struct MultiBlockHolder : torch::CustomClassHolder {
  explicit MultiBlockHolder(MultiBlock b) : block(std::move(b)) {}
  MultiBlock block;
};

struct MultiCheckpointFunction : torch::autograd::Function<MultiCheckpointFunction> {
  // A TensorList (not a std::vector) so that autograd tracks each tensor in it as an input.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                               c10::intrusive_ptr<MultiBlockHolder> holder, torch::Tensor /*anchor*/) {
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["block"] = c10::IValue::make_capsule(holder);
    torch::NoGradGuard no_grad;
    return holder->block(inputs.vec());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto saved = ctx->get_saved_variables();
    auto holder = ctx->saved_data["block"].toCapsule();
    auto* block = static_cast<MultiBlockHolder*>(holder.get());
    std::vector<torch::Tensor> xs;
    for (const auto& t : saved) xs.push_back(t.detach().requires_grad_(t.requires_grad()));
    torch::Tensor y;
    {
      torch::AutoGradMode enable(true);
      y = block->block(xs);
    }
    if (y.requires_grad()) torch::autograd::backward({y}, {grads[0]});
    torch::autograd::variable_list out;
    for (const auto& x : xs) out.push_back(x.requires_grad() ? x.grad() : torch::Tensor());
    out.push_back(torch::Tensor());  // the holder
    out.push_back(torch::Tensor());  // the anchor
    return out;
  }
};

}  // namespace

torch::Tensor checkpoint(MultiBlock block, const std::vector<torch::Tensor>& inputs) {
  if (!torch::GradMode::is_enabled()) return block(inputs);
  TORCH_CHECK(deferring_store() == nullptr,
              "[activation checkpoint] a block of several inputs under split backward (a weight-gradient store) "
              "is not supported");
  bool edge = false;
  for (const auto& x : inputs) edge = edge || x.requires_grad();
  return MultiCheckpointFunction::apply(at::TensorList(inputs), c10::make_intrusive<MultiBlockHolder>(std::move(block)),
                                        edge ? inputs.front() : gradient_anchor());
}

torch::Tensor checkpoint(Block block, const torch::Tensor& input) {
  if (!torch::GradMode::is_enabled()) return block(input);
  // The Function is recorded only when an input carries a gradient edge: a frozen embedding's
  // output does not, so an anchor that does goes beside it (else the input again: no gradient goes
  // to that third argument).
  return CheckpointFunction::apply(input, c10::make_intrusive<BlockHolder>(std::move(block), deferring_store()),
                                   input.requires_grad() ? input : gradient_anchor());
}

}  // namespace colossal::nn
