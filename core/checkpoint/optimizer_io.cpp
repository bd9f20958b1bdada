#include "core/checkpoint/optimizer_io.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <map>

#include "core/common/check.h"

namespace colossal::checkpoint {
namespace {

std::map<const void*, std::string> names_by_tensor(const NamedTensors& params) {
  std::map<const void*, std::string> m;
  for (const auto& [name, t] : params) m[t.unsafeGetTensorImpl()] = name;
  return m;
}

at::Tensor step_tensor(int64_t step) { return torch::tensor({step}, torch::kInt64); }

}  // namespace

NamedTensors optimizer_state(const torch::optim::Optimizer& optimizer, const NamedTensors& params) {
  auto names = names_by_tensor(params);
  NamedTensors out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(p.unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      auto n = names.find(p.unsafeGetTensorImpl());
      COLOSSAL_CHECK(n != names.end(), "[checkpoint] the optimizer holds a tensor that is not a ",
                     "named parameter of the model");
      const std::string& name = n->second;
      auto* state = it->second.get();
      if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state)) {
        out.emplace_back(name + ".exp_avg", s->exp_avg());
        out.emplace_back(name + ".exp_avg_sq", s->exp_avg_sq());
        out.emplace_back(name + ".step", step_tensor(s->step()));
      } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(state)) {
        out.emplace_back(name + ".exp_avg", a->exp_avg());
        out.emplace_back(name + ".exp_avg_sq", a->exp_avg_sq());
        out.emplace_back(name + ".step", step_tensor(a->step()));
      } else if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(state)) {
        if (g->momentum_buffer().defined()) out.emplace_back(name + ".momentum_buffer", g->momentum_buffer());
      } else {
        COLOSSAL_FAIL("[checkpoint] optimizer state of '", name, "' has a type this version ",
                      "cannot save (supported: Adam, AdamW, FusedAdamW, SGD)");
      }
    }
  }
  return out;
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedTensors& params,
                          const CheckpointReader& reader) {
  auto names = names_by_tensor(params);
  torch::NoGradGuard no_grad;
  bool is_adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr ||
                  dynamic_cast<torch::optim::AdamWOptions*>(&optimizer.defaults()) != nullptr;
  bool is_adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  bool is_sgd = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto n = names.find(p.unsafeGetTensorImpl());
      COLOSSAL_CHECK(n != names.end(), "[checkpoint] the optimizer holds an unnamed tensor");
      const std::string& name = n->second;
      auto load = [&](const std::string& key) {
        COLOSSAL_CHECK(reader.contains(name + key), "[checkpoint] optimizer state for '", name,
                       "' lacks '", name + key, "'");
        auto t = reader.load(name + key);
        return t;
      };
      if (!reader.contains(name + ".exp_avg") && !reader.contains(name + ".momentum_buffer")) {
        continue;  // this parameter had no state yet (never stepped)
      }
      auto key = p.unsafeGetTensorImpl();
      if (is_adamw || is_adam) {
        auto m = load(".exp_avg"), v = load(".exp_avg_sq");
        COLOSSAL_CHECK(m.sizes() == p.sizes(), "[checkpoint] optimizer state '", name,
                       ".exp_avg' has shape ", m.sizes(), ", the parameter ", p.sizes());
        int64_t step = load(".step").item<int64_t>();
        if (is_adamw) {
          auto s = std::make_unique<torch::optim::AdamWParamState>();
          s->exp_avg(m.to(p.dtype()));
          s->exp_avg_sq(v.to(p.dtype()));
          s->step(step);
          optimizer.state()[key] = std::move(s);
        } else {
          auto s = std::make_unique<torch::optim::AdamParamState>();
          s->exp_avg(m.to(p.dtype()));
          s->exp_avg_sq(v.to(p.dtype()));
          s->step(step);
          optimizer.state()[key] = std::move(s);
        }
      } else if (is_sgd) {
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(load(".momentum_buffer").to(p.dtype()));
        optimizer.state()[key] = std::move(s);
      } else {
        COLOSSAL_FAIL("[checkpoint] cannot restore state into this optimizer type");
      }
    }
  }
}

}  // namespace colossal::checkpoint
