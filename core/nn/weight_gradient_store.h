#pragma once
// Split backward for zero-bubble pipeline schedules: the input-gradient half of a backward (B)
// runs now and is sent upstream at once; the weight-gradient half (W) runs later, in the bubbles.
//
// A linear layer's backward is two GEMMs: dX = dY W (needed upstream now) and dW = dY^T X (needed
// only by the optimizer). Under DeferWeightGradients, nn::linear records a node that computes dX
// only and leaves (X, dY) in a WeightGradientStore; W computes dW from them later, without
// walking the autograd graph a second time. Blocks under activation checkpointing put their
// parameters' gradients into the same store (their recomputed linears defer as well).
//
//   nn::WeightGradientStore store;
//   { nn::DeferWeightGradients defer(&store); y = model(x); }
//   auto g = torch::autograd::grad({y}, {x}, {dy});  // B: dX, with each dW left in the store
//   for (auto& e : store.take()) ...e.gradient()...   // W, later
#include <torch/types.h>

#include <functional>
#include <mutex>
#include <vector>

namespace colossal::nn {

class WeightGradientStore {
 public:
  /// One parameter's gradient share, computed when asked (a dW GEMM) or already known.
  struct Entry {
    torch::Tensor param;
    std::function<torch::Tensor()> gradient;
  };

  /// Thread-safe: on a GPU, backward runs on the device's autograd thread.
  void add(torch::Tensor param, std::function<torch::Tensor()> gradient);
  /// Everything added since the last take, in the order it came.
  std::vector<Entry> take();

 private:
  std::mutex mutex_;
  std::vector<Entry> entries_;
};

/// While alive, nn::linear calls on this thread defer their weight gradients into `store`
/// (nullptr: no deferral). Nests; restores the previous store on exit.
class DeferWeightGradients {
 public:
  explicit DeferWeightGradients(WeightGradientStore* store);
  ~DeferWeightGradients();
  DeferWeightGradients(const DeferWeightGradients&) = delete;
  DeferWeightGradients& operator=(const DeferWeightGradients&) = delete;

 private:
  WeightGradientStore* previous_;
};

/// The store linear layers defer into on this thread now, or nullptr.
WeightGradientStore* deferring_store();

/// y = x W^T + b, as torch::nn::functional::linear. Under DeferWeightGradients (grad mode on and
/// x needing a gradient) its backward computes x's gradient only and adds W's and b's to the
/// store; otherwise it is the plain op.
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias = {});

/// The leaf tensors (parameters) a backward from `root` would accumulate gradients into.
std::vector<torch::Tensor> graph_leaves(const torch::Tensor& root);

}  // namespace colossal::nn
