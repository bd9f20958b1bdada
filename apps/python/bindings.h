#pragma once
// One function per part of the `colossal._C` extension (module.cpp calls them in order).
#include <torch/csrc/utils/pybind.h>

namespace colossal::python {

void bind_dist(pybind11::module_& m);     // colossal._C.dist: the runtime and the collectives
void bind_booster(pybind11::module_& m);  // colossal._C: Booster, plugins, boosted optimizers

}  // namespace colossal::python
