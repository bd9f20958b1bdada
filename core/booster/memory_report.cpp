// MemoryReport and the default StepHooks::memory_report.
#include <torch/torch.h>

#include <cstdio>
#include <set>

#include "core/booster/plugin.h"

namespace colossal::booster {
namespace {

std::string gib(int64_t bytes) {
  char buf[32];
  if (bytes >= (1LL << 30)) std::snprintf(buf, sizeof buf, "%.3f GiB", static_cast<double>(bytes) / (1LL << 30));
  else std::snprintf(buf, sizeof buf, "%.3f MiB", static_cast<double>(bytes) / (1LL << 20));
  return buf;
}

const char* tier_of(const torch::Tensor& t) { return t.device().is_cpu() ? "host" : "device"; }

}  // namespace

int64_t MemoryReport::total(const std::string& tier) const {
  int64_t sum = 0;
  for (const auto& [category, tiers] : bytes) {
    auto it = tiers.find(tier);
    if (it != tiers.end()) sum += it->second;
  }
  return sum;
}

int64_t MemoryReport::total() const {
  int64_t sum = 0;
  for (const auto& [category, tiers] : bytes)
    for (const auto& [tier, n] : tiers) sum += n;
  return sum;
}

std::string MemoryReport::format() const {
  std::string out;
  for (const auto& [category, tiers] : bytes) {
    char head[40];
    std::snprintf(head, sizeof head, "%-18s", category.c_str());
    out += head;
    for (const auto& [tier, n] : tiers) out += "  " + tier + " " + gib(n);
    out += "\n";
  }
  return out;
}

MemoryReport StepHooks::memory_report(const torch::nn::Module& model,
                                         const torch::optim::Optimizer& optimizer) const {
  MemoryReport r;
  std::set<const void*> seen;  // storages counted once (views share them)
  auto count = [&](const std::string& category, const torch::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return;
    const void* key = t.storage().unsafeGetStorageImpl();
    if (!seen.insert(key).second) return;
    r.add(category, tier_of(t), static_cast<int64_t>(t.storage().nbytes()));
  };
  for (const auto& p : model.parameters()) count("parameters", p);
  for (const auto& p : model.parameters()) count("gradients", p.grad());
  for (const auto& g : optimizer.param_groups())
    for (const auto& p : g.params()) {
      count("master weights", p);
      count("gradients", p.grad());
    }
  for (const auto& [key, state] : optimizer.state()) {
    if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state.get())) {
      count("optimizer state", s->exp_avg());
      count("optimizer state", s->exp_avg_sq());
    } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(state.get())) {
      count("optimizer state", a->exp_avg());
      count("optimizer state", a->exp_avg_sq());
    } else if (auto* m = dynamic_cast<torch::optim::SGDParamState*>(state.get())) {
      count("optimizer state", m->momentum_buffer());
    }
  }
  return r;
}

}  // namespace colossal::booster
