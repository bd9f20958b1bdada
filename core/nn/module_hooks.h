#pragma once
// Forward hooks for LibTorch modules.
//
// LibTorch's C++ modules have no forward hooks (and tensors have no subclass hooks), yet ZeRO-3
// must gather a module's parameters just before it runs and release them after. A model opts in
// by running each module that owns parameters through colossal::nn::call:
//
//   x = colossal::nn::call(fc1, x);          // instead of fc1(x) / fc1->forward(x)
//
// Without hooks installed, call() is a plain forward (one hash lookup more). Plugins install a
// pre hook (runs before forward and sees the tensor inputs, e.g. to attach autograd hooks that
// run once the module's backward is done) and a post hook (sees the tensor outputs, e.g. to
// attach autograd hooks that run before the module's backward).
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <vector>

namespace colossal::nn {

struct ForwardHooks {
  std::function<void(const std::vector<torch::Tensor>& inputs)> pre;
  std::function<void(const std::vector<torch::Tensor>& outputs)> post;
};

/// Installs hooks on `module` (one set per module; installing again replaces it). Returns an
/// id for remove_forward_hooks.
int64_t set_forward_hooks(const torch::nn::Module& module, ForwardHooks hooks);
void remove_forward_hooks(int64_t id);

namespace detail {
std::shared_ptr<const ForwardHooks> hooks_of(const torch::nn::Module* module);
inline void collect(std::vector<torch::Tensor>& out, const torch::Tensor& t) { out.push_back(t); }
template <class... T>
void collect(std::vector<torch::Tensor>& out, const std::tuple<T...>& t) {
  std::apply([&](const auto&... e) { (collect(out, e), ...); }, t);
}
template <class T>
void collect(std::vector<torch::Tensor>&, const T&) {}  // outputs that hold no tensors

template <class Impl>
Impl& impl_of(torch::nn::ModuleHolder<Impl>& holder) { return *holder; }
template <class Impl>
Impl& impl_of(const std::shared_ptr<Impl>& ptr) { return *ptr; }
template <class Impl, class = std::enable_if_t<std::is_base_of_v<torch::nn::Module, Impl>>>
Impl& impl_of(Impl& module) { return module; }
}  // namespace detail

/// fn() with `module`'s hooks around it: for computations on a module's parameters other than
/// its forward (e.g. an output layer tied to the embedding matrix). `inputs`: the tensors fn
/// reads besides the module's parameters.
template <class Fn>
auto run_hooked(const torch::nn::Module& module, const std::vector<torch::Tensor>& inputs, Fn&& fn) {
  auto hooks = detail::hooks_of(&module);
  if (hooks == nullptr) return fn();
  if (hooks->pre) hooks->pre(inputs);
  auto out = fn();
  if (hooks->post) {
    std::vector<torch::Tensor> tensors;
    detail::collect(tensors, out);
    hooks->post(tensors);
  }
  return out;
}
template <class Fn>
auto run_hooked(const torch::nn::Module& module, Fn&& fn) {
  return run_hooked(module, {}, std::forward<Fn>(fn));
}

/// module->forward(args...) with the module's hooks around it.
template <class M, class... Args>
auto call(M&& module, Args&&... args) {
  auto& impl = detail::impl_of(module);
  auto hooks = detail::hooks_of(&impl);
  if (hooks == nullptr) return impl.forward(std::forward<Args>(args)...);
  if (hooks->pre) {
    std::vector<torch::Tensor> inputs;
    (detail::collect(inputs, args), ...);
    hooks->pre(inputs);
  }
  auto out = impl.forward(std::forward<Args>(args)...);
  if (hooks->post) {
    std::vector<torch::Tensor> tensors;
    detail::collect(tensors, out);
    hooks->post(tensors);
  }
  return out;
}

}  // namespace colossal::nn
