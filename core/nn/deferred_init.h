#pragma once
// Lazy construction: build a model without materialising its weights, then let boost()
// materialise only what this rank keeps (its ZeRO-3 shards, its tensor-parallel slices).
//
//   torch::manual_seed(seed);
//   LlamaForCausalLM model{nullptr};
//   {
//     colossal::nn::DeferredInitGuard deferred;  // parameters with shapes but no memory
//     model = LlamaForCausalLM(config, parallel);
//   }
//   booster.boost(model.ptr(), optimizer);        // materialises what the plugin keeps
//
// While a guard lives on this thread, layers that support it (parallel::ParallelLinear,
// ParallelEmbedding, the models' norms) create their parameters *deferred* and draw no random
// numbers: CPU tensors with their shapes but no memory (a storage of 0 bytes). Not the meta
// device: a meta tensor cannot later take CPU or CUDA data in place (set_data refuses the type
// change), and modules keep handles to their parameters that must stay valid; a deferred
// tensor takes its data in place, as Gemini's released chunks do. Reading one before it is
// materialised is a bug (it has no memory). A model built that way says how to initialise any parameter by its name
// (ParameterInitializer), in its full, unsplit shape, independently of every other parameter; so
// a rank can produce exactly the values the eager model would hold on its shards and slices, one
// parameter at a time, and the eager model is initialised through the same function.
#include <torch/nn/module.h>

#include <cstdint>
#include <string>

namespace colossal::parallel {
struct ShardSpec;
}  // namespace colossal::parallel

namespace colossal::nn {

class DeferredInitGuard {
 public:
  DeferredInitGuard();
  ~DeferredInitGuard();
  DeferredInitGuard(const DeferredInitGuard&) = delete;
  DeferredInitGuard& operator=(const DeferredInitGuard&) = delete;

 private:
  bool previous_;
};

/// True while a DeferredInitGuard lives on this thread.
bool deferred_init_enabled();
/// A tensor with the shape (and device and dtype of `options`) but no memory.
torch::Tensor deferred_empty(at::IntArrayRef shape, const torch::TensorOptions& options = {});
/// Gives a deferred tensor zero-filled memory in place (handles to it stay valid); a no-op for
/// a tensor that has memory.
void allocate_zeros(const torch::Tensor& t);
/// True for a tensor made by deferred_empty that has not been given data yet.
bool is_deferred(const torch::Tensor& t);

/// A model that initialises any parameter from its name alone.
class ParameterInitializer {
 public:
  virtual ~ParameterInitializer() = default;
  /// Fills `full` (the parameter's full, unsplit shape, on the CPU, fp32) with its initial values.
  virtual void init_parameter(const std::string& name, torch::Tensor& full) const = 0;
  /// The seed every parameter's values derive from (so ranks can agree on it).
  virtual uint64_t init_seed() const = 0;
  virtual void set_init_seed(uint64_t seed) = 0;
  /// Called once every deferred parameter has its values (a checkpoint-backed initializer can
  /// drop its mapped files).
  virtual void parameters_materialized() {}
};

/// A per-parameter seed: `seed` mixed with the parameter's name (splitmix64 of an FNV-1a hash).
uint64_t parameter_seed(uint64_t seed, const std::string& name);

/// Makes every parameter of `module` that has memory deferred again, in place. For layers that
/// cannot create deferred parameters themselves (LibTorch's Conv2d, LayerNorm): the model's
/// initializer then makes their values at boost like every other parameter's.
void defer_parameters(torch::nn::Module& module);

/// True when any parameter of `model` is still deferred.
bool has_deferred_parameters(const torch::nn::Module& model);

/// An uninitialised CPU tensor for a short-lived large buffer (a parameter's full value on its
/// way to a shard, a chunk or a quantized form). From 1 MiB up its memory is its own mapping,
/// returned to the system when the tensor is freed: the heap keeps what it frees
/// (common/allocator.h), and smaller allocations made between two such buffers split the hole
/// the first left, so a model built one parameter at a time would keep most of its full-precision
/// size resident after it was quantized or sharded away.
torch::Tensor transient_empty(at::IntArrayRef shape, c10::ScalarType dtype = torch::kFloat32);

/// The full (unsplit, fp32, CPU) initial value of parameter `name` of `model`, whose tensor on
/// this rank is `local` (`split`: its tensor-parallel spec, or nullptr), from the model's
/// ParameterInitializer. Throws naming the model when it has none.
torch::Tensor initial_full_value(torch::nn::Module& model, const std::string& name, const torch::Tensor& local,
                                 const parallel::ShardSpec* split);

/// Materialises every deferred parameter of `model` on `device`, one at a time: its full value
/// from the model's ParameterInitializer (on the CPU), and this rank's tensor-parallel slice
/// kept. Throws naming the model when it has deferred parameters but no initializer.
void materialize(torch::nn::Module& model, const c10::Device& device);

}  // namespace colossal::nn
