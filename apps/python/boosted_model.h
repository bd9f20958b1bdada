#pragma once
// What the bindings pass between their parts: a C++ module handed to the Booster (CppModule: a
// LLaMA model from colossal.llama), and what boost() returns (BoostedModel).
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <string>

#include "core/booster/booster.h"

namespace colossal::python {

/// A C++ torch::nn::Module as Python holds it: the Booster boosts the module itself, so every
/// plugin's wrapping (ZeRO-3's gathers around module calls included) applies.
struct CppModule {
  std::shared_ptr<torch::nn::Module> module;
};

/// The module the plugin runs (a shell over a Python module's tensors, or a C++ module), the
/// boosted objects, and the no_sync guard while one is open.
struct BoostedModel {
  std::shared_ptr<torch::nn::Module> module;
  booster::Boosted boosted;
  std::unique_ptr<booster::NoSyncGuard> no_sync;
  booster::BoostedOptimizer& optimizer() { return *boosted.optimizer; }

  /// The boosted module's submodule by dotted name ("" is the module itself); null if none.
  torch::nn::Module* submodule(const std::string& name) {
    if (by_name_.empty())
      for (const auto& item : module->named_modules("")) by_name_[item.key()] = item.value().get();
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }

 private:
  std::map<std::string, torch::nn::Module*> by_name_;
};

}  // namespace colossal::python
