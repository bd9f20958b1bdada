#pragma once
// A torch::nn::Module that holds a Python module's parameters and buffers — the same tensors,
// not copies — under the same dotted names ("layers.0.weight" becomes child "layers", its child
// "0", parameter "weight"). The Booster's plugins work on tensors (gradient-ready hooks, flat
// buffers they point parameters into with set_data, checkpoints by name), so a model defined in
// Python trains under them while its forward stays Python's.
#include <torch/nn/module.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colossal::python {

using NamedTensorList = std::vector<std::pair<std::string, at::Tensor>>;

/// Builds the shell. Errors name a parameter that is not a leaf tensor or a name given twice.
std::shared_ptr<torch::nn::Module> make_module_shell(const NamedTensorList& parameters,
                                                     const NamedTensorList& buffers);

}  // namespace colossal::python
