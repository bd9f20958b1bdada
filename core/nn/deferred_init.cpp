#include "core/nn/deferred_init.h"

#include <sys/mman.h>
#include <torch/torch.h>

#include <cerrno>
#include <cstring>

#include "core/common/check.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::nn {
namespace {
thread_local bool deferred = false;
}  // namespace

DeferredInitGuard::DeferredInitGuard() : previous_(deferred) { deferred = true; }
DeferredInitGuard::~DeferredInitGuard() { deferred = previous_; }

bool deferred_init_enabled() { return deferred; }

torch::Tensor deferred_empty(at::IntArrayRef shape, const torch::TensorOptions& options) {
  auto t = torch::empty(shape, options);  // untouched pages: never resident
  auto* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
  return t;
}

void allocate_zeros(const torch::Tensor& t) {
  if (!is_deferred(t)) return;
  auto* s = t.storage().unsafeGetStorageImpl();
  const size_t nbytes = static_cast<size_t>(t.numel()) * t.element_size();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
  torch::NoGradGuard no_grad;
  const_cast<torch::Tensor&>(t).zero_();
}

bool is_deferred(const torch::Tensor& t) {
  return t.defined() && t.numel() > 0 && t.has_storage() && t.storage().nbytes() == 0;
}

void defer_parameters(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters())
    if (p.numel() > 0 && !is_deferred(p)) p.set_data(deferred_empty(p.sizes(), p.options()));
}

uint64_t parameter_seed(uint64_t seed, const std::string& name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : name) {
    h ^= c;
    h *= 1099511628211ull;
  }
  uint64_t z = seed ^ h;  // splitmix64
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

torch::Tensor transient_empty(at::IntArrayRef shape, c10::ScalarType dtype) {
  const size_t bytes = static_cast<size_t>(c10::multiply_integers(shape)) * c10::elementSize(dtype);
  if (bytes < (size_t{1} << 20)) return torch::empty(shape, torch::TensorOptions().dtype(dtype));
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  COLOSSAL_CHECK(memory != MAP_FAILED, "[nn] could not map ", bytes, " bytes for a parameter's full value (",
                 std::strerror(errno), ")");
  return torch::from_blob(memory, shape, [bytes](void* p) { munmap(p, bytes); },
                          torch::TensorOptions().dtype(dtype));
}

bool has_deferred_parameters(const torch::nn::Module& model) {
  for (const auto& p : model.parameters())
    if (is_deferred(p)) return true;
  return false;
}

torch::Tensor initial_full_value(torch::nn::Module& model, const std::string& name, const torch::Tensor& local,
                                 const parallel::ShardSpec* split) {
  auto* init = dynamic_cast<ParameterInitializer*>(&model);
  COLOSSAL_CHECK(init != nullptr, "[nn] the model (", model.name(), ") was built under deferred init but does not say "
                 "how to initialise its parameters (it is no colossal::nn::ParameterInitializer); build it eagerly");
  auto full = transient_empty(parallel::full_shape(local, split));
  init->init_parameter(name, full);
  return full;
}

void materialize(torch::nn::Module& model, const c10::Device& device) {
  if (!has_deferred_parameters(model)) return;
  torch::NoGradGuard no_grad;
  const auto specs = parallel::collect_shard_specs(model);
  for (auto& item : model.named_parameters()) {  // one at a time
    auto& p = item.value();
    if (!is_deferred(p)) continue;
    const auto* split = parallel::split_spec(specs, item.key());
    const auto full = initial_full_value(model, item.key(), p, split);
    // A copy always: `full` is a transient mapping, the parameter lives on the heap.
    p.set_data(parallel::local_part(full, split, p).to(device, p.scalar_type(), false, /*copy=*/true));
  }
  dynamic_cast<ParameterInitializer&>(model).parameters_materialized();
}

}  // namespace colossal::nn
