#include "core/parallel/data/model_sync.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/nn/deferred_init.h"

namespace colossal::parallel {

void broadcast_init_seed(torch::nn::Module& model, const dist::Group& group) {
  auto* init = dynamic_cast<nn::ParameterInitializer*>(&model);
  if (init == nullptr) return;
  auto seed = torch::tensor({static_cast<int64_t>(init->init_seed())}, torch::kInt64);
  dist::broadcast(seed, 0, group);
  init->set_init_seed(static_cast<uint64_t>(seed.item<int64_t>()));
}

void broadcast_model_state(torch::nn::Module& model, const dist::Group& group, bool buffers,
                           const std::set<std::string>& experts, const dist::Group& expert_group) {
  torch::NoGradGuard no_grad;
  // A lazily built model's deferred parameters are made from its seed: that is what is shared.
  broadcast_init_seed(model, group);
  for (auto& item : model.named_parameters()) {
    if (nn::is_deferred(item.value())) continue;
    auto t = item.value().detach();
    if (!experts.count(item.key())) {
      dist::broadcast(t, 0, group);
    } else if (expert_group.is_member() && expert_group.size() > 1) {
      dist::broadcast(t, 0, expert_group);
    }
  }
  if (!buffers) return;
  for (auto& b : model.buffers()) {
    auto t = b.detach();
    dist::broadcast(t, 0, group);
  }
}

std::vector<std::shared_ptr<torch::autograd::Node>> add_gradient_ready_hooks(
    const std::vector<torch::Tensor>& params, const std::vector<std::string>& names,
    const std::string& plugin, std::function<void(size_t)> on_ready) {
  auto callback = std::make_shared<std::function<void(size_t)>>(std::move(on_ready));
  std::vector<std::shared_ptr<torch::autograd::Node>> out;
  for (size_t i = 0; i < params.size(); ++i) {
    auto acc = torch::autograd::impl::grad_accumulator(params[i]);
    COLOSSAL_CHECK(acc != nullptr, "[", plugin, "] parameter '", names[i], "' has no gradient accumulator");
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [callback, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          (*callback)(i);
          return outputs;
        }));
    out.push_back(std::move(acc));
  }
  return out;
}

}  // namespace colossal::parallel
