#include "core/nn/module_hooks.h"

#include <atomic>
#include <mutex>
#include <unordered_map>

namespace colossal::nn {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<const torch::nn::Module*, std::pair<int64_t, std::shared_ptr<ForwardHooks>>> by_module;
  int64_t next_id = 1;
  // Read without the lock on the hot path only when nothing was ever installed.
  std::atomic<bool> any{false};
};

Registry& registry() {
  static Registry r;
  return r;
}

}  // namespace

int64_t set_forward_hooks(const torch::nn::Module& module, ForwardHooks hooks) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  int64_t id = r.next_id++;
  r.by_module[&module] = {id, std::make_shared<ForwardHooks>(std::move(hooks))};
  r.any = true;
  return id;
}

void remove_forward_hooks(int64_t id) {
  auto& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto it = r.by_module.begin(); it != r.by_module.end(); ++it) {
    if (it->second.first == id) {
      r.by_module.erase(it);
      return;
    }
  }
}

namespace detail {
std::shared_ptr<const ForwardHooks> hooks_of(const torch::nn::Module* module) {
  auto& r = registry();
  if (!r.any.load(std::memory_order_relaxed)) return nullptr;
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_module.find(module);
  return it == r.by_module.end() ? nullptr : it->second.second;
}
}  // namespace detail

}  // namespace colossal::nn
