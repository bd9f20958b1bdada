#include "apps/python/module_shell.h"

#include "core/common/check.h"

namespace colossal::python {
namespace {

// The module under which `dotted` lives, creating the children on the way; returns it and the
// last name part.
std::pair<torch::nn::Module*, std::string> owner_of(torch::nn::Module& root, const std::string& dotted) {
  torch::nn::Module* m = &root;
  size_t start = 0;
  for (size_t dot = dotted.find('.'); dot != std::string::npos; dot = dotted.find('.', start)) {
    const std::string part = dotted.substr(start, dot - start);
    COLOSSAL_CHECK(!part.empty(), "[python] the name '", dotted, "' has an empty part");
    auto children = m->named_children();
    if (auto* child = children.find(part)) {
      m = child->get();
    } else {
      m = m->register_module(part, std::make_shared<torch::nn::Module>()).get();
    }
    start = dot + 1;
  }
  const std::string last = dotted.substr(start);
  COLOSSAL_CHECK(!last.empty(), "[python] the name '", dotted, "' ends with a dot");
  return {m, last};
}

}  // namespace

std::shared_ptr<torch::nn::Module> make_module_shell(const NamedTensorList& parameters,
                                                     const NamedTensorList& buffers) {
  auto root = std::make_shared<torch::nn::Module>();
  for (const auto& [name, tensor] : parameters) {
    COLOSSAL_CHECK(tensor.defined(), "[python] parameter '", name, "' is None");
    COLOSSAL_CHECK(tensor.is_leaf(), "[python] parameter '", name,
                   "' is not a leaf tensor (computed from another); a module's parameters are leaves");
    auto [owner, last] = owner_of(*root, name);
    COLOSSAL_CHECK(!owner->named_parameters(false).contains(last), "[python] parameter '", name,
                   "' is given twice (a tied weight is listed once by named_parameters())");
    // requires_grad as the Python side has it: frozen parameters stay frozen.
    owner->register_parameter(last, tensor, tensor.requires_grad());
  }
  for (const auto& [name, tensor] : buffers) {
    if (!tensor.defined()) continue;  // Python allows None buffers; nothing to save
    auto [owner, last] = owner_of(*root, name);
    owner->register_buffer(last, tensor);
  }
  return root;
}

}  // namespace colossal::python
