#pragma once
// A Plugin decides how a model and optimizer are spread over processes: which mesh it needs,
// how gradients are synchronised, what precision runs, whether no_sync is possible, and how
// checkpoints are written. The Booster (booster.h) is the user-facing front; plugins are chosen
// by name through the registry (registry.cpp: one explicit line per plugin).
//
// Adding a plugin: one folder in core/booster/plugins/, one line in registry.cpp.
//
// Every plugin is built with the job's layout (dist::ParallelDims: the sizes of every axis and
// the groups) and a device; make_plugin(PluginConfig) (registry.h) builds both from a config.
#include <c10/core/Device.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <set>
#include <string>

#include "core/checkpoint/optimizer_io.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/options.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/context.h"
#include "core/parallel/pipeline/runner.h"

namespace colossal::booster {

/// Bytes a rank holds for model state, by category ("parameters", "gradients", "master weights",
/// "optimizer state", plus what a plugin adds) and tier ("host", "device", "nvme").
struct MemoryReport {
  std::map<std::string, std::map<std::string, int64_t>> bytes;
  std::map<std::string, double> counters;  // e.g. chunk gathers, evictions
  void add(const std::string& category, const std::string& tier, int64_t n) { bytes[category][tier] += n; }
  int64_t total(const std::string& tier) const;
  int64_t total() const;
  /// One line per category: "parameters  host 1.23 GiB  nvme 4.56 GiB".
  std::string format() const;
};

/// What a plugin installs on a model: the per-step hooks the Booster calls around backward and
/// the optimizer step. Every method has a correct single-process default.
class ModelWrapper {
 public:
  virtual ~ModelWrapper() = default;
  /// Called by Booster::backward before loss.backward().
  virtual void before_backward() {}
  /// Called by Booster::backward after loss.backward(): finish gradient synchronisation.
  virtual void after_backward() {}
  /// While false, backward accumulates local gradients without communication (no_sync).
  virtual void set_gradient_sync(bool enabled);
  virtual bool gradient_sync() const { return true; }
  /// The dtype the model computes in (inputs should be cast to it).
  virtual c10::ScalarType compute_dtype() const { return c10::kFloat; }
  /// What Booster::backward multiplies the loss by (fp16 loss scaling); 1 otherwise.
  virtual double loss_scale() const { return 1.0; }
  /// Runs the optimizer step (mixed precision: on fp32 masters, skipped on overflow). Returns
  /// whether the step ran.
  virtual bool optimizer_step(torch::optim::Optimizer& optimizer) {
    optimizer.step();
    return true;
  }
  /// The full, unsplit model state: what is saved, and what a load writes into (in place).
  /// Mixed precision returns the fp32 masters in place of the working parameters.
  virtual checkpoint::NamedTensors full_model_state(const torch::nn::Module& model) const;
  /// What a save writes: full_model_state(), plus (pipeline parallelism, on the rank that
  /// writes) the other stages' tensors, so the files hold the whole model. Collective.
  virtual checkpoint::NamedTensors model_state_to_save(const torch::nn::Module& model) const {
    return full_model_state(model);
  }
  /// Names of the whole model's state that other ranks hold (pipeline stages): a load skips
  /// them instead of calling them unexpected.
  virtual std::set<std::string> state_held_elsewhere() const { return {}; }
  /// Called after a load wrote into full_model_state() (mixed precision: masters -> working).
  virtual void after_model_load() {}
  /// The tensors the optimizer updates, as slices of named parameters (what optimizer state is
  /// saved and loaded by). Default: the whole tensors of full_model_state().
  virtual std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module& model) const;
  /// Every parameter's gradient as the optimizer gets it (reduced over data parallelism,
  /// unscaled, before clipping), whole and in fp32; under pipeline parallelism the pipeline's
  /// first rank gets every stage's. Collective. For checking a layout (colossal verify), not the
  /// hot path. A gradient held outside memory (streamed from NVMe) is left out. Default: the
  /// .grad() of optimizer_slices(), assembled over gradient_shard_group() when sliced.
  virtual checkpoint::NamedTensors full_gradients(const torch::nn::Module& model) const;
  /// The group over which optimizer_slices() are spread (ZeRO); nullptr: each rank holds whole tensors.
  virtual const dist::Group* gradient_shard_group() const { return nullptr; }
  /// True when each rank's optimizer holds a different part of the state (every rank then
  /// writes its own slice file); false when it is replicated (rank 0 writes it).
  virtual bool optimizer_sharded() const { return false; }
  /// With sharded state: whether this rank's slices are its own to write. A replica of another
  /// rank's (a data-parallel copy of a pipeline stage) writes an empty file, so a load does not
  /// find the same piece twice.
  virtual bool writes_optimizer_slices() const { return true; }
  /// With sharded state written by this rank: whether the slice named `slice` is its to write. A
  /// plugin whose ranks share some parameters but not others (expert parallelism) picks.
  virtual bool writes_optimizer_slice(const std::string& slice) const { return true; }
  /// Optimizer state the plugin keeps outside the optimizer (streamed from NVMe), as
  /// optimizer_state() would write it; `metadata` gets the slices' offsets.
  virtual checkpoint::NamedTensors external_optimizer_state(std::map<std::string, std::string>*) const {
    return {};
  }
  virtual void load_external_optimizer_state(const checkpoint::OptimizerStateSource&) {}
  /// Model-state memory of this rank. The default counts distinct storages of the model's
  /// parameters and gradients, the optimizer's tensors that are not model parameters (fp32
  /// masters) and the optimizer's state.
  virtual MemoryReport memory_report(const torch::nn::Module& model,
                                     const torch::optim::Optimizer& optimizer) const;
  /// Plugin state that checkpoints carry (e.g. the fp16 loss scaler).
  virtual std::map<std::string, double> extra_state() const { return {}; }
  virtual void load_extra_state(const std::map<std::string, double>&) {}
  /// Zeroes gradients in whatever storage the plugin keeps them.
  virtual void zero_grad(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }
  /// Clips gradients to a global norm across every rank holding a part of them; returns the
  /// total norm before clipping.
  virtual double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm,
                                double norm_type);
  /// One training step of a pipeline-parallel model (its forward, backward and gradient
  /// synchronisation over the microbatches); returns the loss on every rank. Plugins without a
  /// pipeline axis refuse.
  virtual double execute_pipeline(const parallel::pipeline::StageFunctions& model,
                                  const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);
  /// The pipeline's forward only (evaluation): the mean loss over the microbatches, every rank.
  virtual double evaluate_pipeline(const parallel::pipeline::StageFunctions& model,
                                   const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);
  const std::string& plugin_name() const { return plugin_name_; }

 protected:
  explicit ModelWrapper(std::string plugin_name) : plugin_name_(std::move(plugin_name)) {}

 private:
  std::string plugin_name_;
};

/// What every plugin is built with.
struct PluginEnvironment {
  std::shared_ptr<const dist::ParallelDims> dims;  // null: pure data parallelism over the world
  c10::Device device = c10::kCPU;                  // where parameters, gradients and buckets live
};

class Plugin {
 public:
  explicit Plugin(PluginEnvironment env = {}) : env_(std::move(env)) {}
  virtual ~Plugin() = default;
  virtual std::string name() const = 0;

  // What the plugin controls (the Booster asks before delegating).
  virtual bool supports_no_sync() const { return false; }
  virtual std::string precision() const { return "fp32"; }
  virtual bool controls_checkpoint_io() const { return false; }
  /// True when the plugin materialises a lazily built model's deferred parameters itself,
  /// keeping only its shards (Gemini); otherwise boost() materialises each rank's slices first.
  virtual bool materializes_deferred() const { return false; }
  const c10::Device& device() const { return env_.device; }

  /// The job's layout. A plugin built without one gets pure data parallelism over the world
  /// (created on first use, after dist::init()).
  const dist::ParallelDims& dims() const { return *shared_dims(); }
  std::shared_ptr<const dist::ParallelDims> shared_dims() const;

  /// The groups (and, under pipeline parallelism, the stage) a model is built with for this
  /// plugin's layout. Collective the first time: every rank calls it.
  virtual parallel::ParallelContext parallel_context() { return parallel::ParallelContext::from(dims()); }

  /// This process's place among the data-parallel replicas (what a sampler shards by).
  virtual std::pair<int, int> data_parallel_rank_and_size() const;
  /// The plugin's own options as it runs with them (names as in a config file).
  virtual std::vector<OptionInfo> option_values() const { return {}; }

  /// Prepares `model` (in place: hooks, broadcasts, casts) and returns its per-step wrapper.
  virtual std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer) = 0;

 private:
  PluginEnvironment env_;
  mutable std::shared_ptr<const dist::ParallelDims> dims_;
};

}  // namespace colossal::booster
