#include "core/booster/full_gradients.h"

#include <torch/torch.h>

#include <map>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::booster {

checkpoint::NamedTensors assemble_gradients(const torch::nn::Module& model,
                                            const std::vector<checkpoint::OptimizerSlice>& slices,
                                            const dist::Group* group) {
  torch::NoGradGuard no_grad;
  // One flat buffer for every parameter (a single all-reduce), and beside it how many pieces
  // covered each element (0: nobody holds it; 2+: replicas, averaged).
  std::map<std::string, int64_t> base;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  int64_t total = 0;
  c10::Device device = c10::kCPU;
  for (const auto& p : model.named_parameters()) {
    if (!p.value().requires_grad()) continue;
    base[p.key()] = total;
    shapes.emplace_back(p.key(), p.value().sizes().vec());
    total += p.value().numel();
    device = p.value().device();
  }
  auto sum = torch::zeros({total}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  auto count = torch::zeros_like(sum);
  for (const auto& s : slices) {
    const auto& g = s.tensor.grad();
    auto it = base.find(s.name);
    if (!g.defined() || it == base.end()) continue;
    const int64_t full = s.full_numel >= 0 ? s.full_numel : s.tensor.numel();
    COLOSSAL_CHECK(s.offset >= 0 && s.offset + g.numel() <= full,
                   "[verify] the gradient piece of '", s.name, "' at ", s.offset, " (", g.numel(),
                   " elements) lies outside its ", full, " elements");
    sum.narrow(0, it->second + s.offset, g.numel()).add_(g.reshape({-1}).to(sum.options()));
    count.narrow(0, it->second + s.offset, g.numel()).add_(1);
  }
  if (group && group->is_member() && group->size() > 1) {
    dist::all_reduce(sum, *group);
    dist::all_reduce(count, *group);
  }
  checkpoint::NamedTensors out;
  for (const auto& [name, shape] : shapes) {
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    auto c = count.narrow(0, base[name], numel);
    if (numel > 0 && c.min().item<float>() == 0) continue;  // not (entirely) in memory anywhere
    out.emplace_back(name, (sum.narrow(0, base[name], numel) / c.clamp_min(1)).reshape(shape));
  }
  return out;
}

}  // namespace colossal::booster
