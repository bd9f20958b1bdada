#include "core/nn/weight_gradient_store.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/custom_class.h>
#include <torch/nn/functional/linear.h>

#include <unordered_set>

namespace colossal::nn {
namespace {

thread_local WeightGradientStore* tls_store = nullptr;

// What backward needs besides the saved input: the parameters (kept as themselves, so W knows
// whose gradient it computes) and the store (captured at forward: backward may run on another
// thread).
struct LinearHolder : torch::CustomClassHolder {
  torch::Tensor weight, bias;
  WeightGradientStore* store = nullptr;
};

struct DeferredLinear : torch::autograd::Function<DeferredLinear> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               c10::intrusive_ptr<LinearHolder> holder) {
    ctx->save_for_backward({x});
    ctx->saved_data["holder"] = c10::IValue::make_capsule(holder);
    return torch::nn::functional::linear(x, holder->weight, holder->bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto x = ctx->get_saved_variables()[0];
    auto capsule = ctx->saved_data["holder"].toCapsule();
    auto* h = static_cast<LinearHolder*>(capsule.get());
    const auto& dy = grads[0];
    auto w = h->weight.detach();
    auto dx = dy.matmul(w);
    // W: dW = dY^T X and db = sum dY over every row, from the two tensors kept until then.
    const int64_t out = w.size(0), in = w.size(1);
    if (h->weight.requires_grad())
      h->store->add(h->weight, [x, dy, out, in] {
        return dy.reshape({-1, out}).t().mm(x.detach().reshape({-1, in}));
      });
    if (h->bias.defined() && h->bias.requires_grad())
      h->store->add(h->bias, [dy, out] { return dy.reshape({-1, out}).sum(0); });
    return {dx, torch::Tensor()};
  }
};

}  // namespace

void WeightGradientStore::add(torch::Tensor param, std::function<torch::Tensor()> gradient) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.push_back({std::move(param), std::move(gradient)});
}

std::vector<WeightGradientStore::Entry> WeightGradientStore::take() {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::exchange(entries_, {});
}

DeferWeightGradients::DeferWeightGradients(WeightGradientStore* store) : previous_(tls_store) { tls_store = store; }
DeferWeightGradients::~DeferWeightGradients() { tls_store = previous_; }

WeightGradientStore* deferring_store() { return tls_store; }

torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
  // The deferred node needs x on the graph: a first layer fed by data (no gradient) keeps the
  // plain op, whose weight gradient then comes with B.
  if (!tls_store || !torch::GradMode::is_enabled() || !x.requires_grad())
    return torch::nn::functional::linear(x, weight, bias);
  auto holder = c10::make_intrusive<LinearHolder>();
  holder->weight = weight;
  holder->bias = bias;
  holder->store = tls_store;
  return DeferredLinear::apply(x, holder);
}

std::vector<torch::Tensor> graph_leaves(const torch::Tensor& root) {
  std::vector<torch::Tensor> leaves;
  if (!root.grad_fn()) {
    if (root.requires_grad()) leaves.push_back(root);
    return leaves;
  }
  std::unordered_set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{root.grad_fn().get()};
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (!node || !seen.insert(node).second) continue;
    if (auto* acc = dynamic_cast<torch::autograd::AccumulateGrad*>(node)) {
      leaves.push_back(acc->variable);
      continue;
    }
    for (const auto& edge : node->next_edges()) todo.push_back(edge.function.get());
  }
  return leaves;
}

}  // namespace colossal::nn
