#pragma once
// One function per part of the `colossal._C` extension (module.cpp calls them in order).
#include <torch/csrc/utils/pybind.h>

namespace colossal::python {

void bind_dist(pybind11::module_& m);     // colossal._C.dist: the runtime and the collectives
void bind_booster(pybind11::module_& m);  // colossal._C: Booster, plugins, boosted optimizers
void bind_apps(pybind11::module_& m);     // colossal._C.apps: train_llama, train_vit as functions
void bind_llama(pybind11::module_& m);    // colossal._C.llama: tokenizer, model, engine, server
void bind_bert(pybind11::module_& m);     // colossal._C.bert: BERT masked LM and classifier
void bind_peft(pybind11::module_& m);     // colossal._C.peft: QLoRA base formats, adapter merging
void bind_posttrain(pybind11::module_& m);  // colossal._C.posttrain: preference losses

}  // namespace colossal::python
