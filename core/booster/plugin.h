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

#include "core/amp/fp8_linear.h"
#include "core/booster/checkpoint_layout.h"
#include "core/booster/pipeline_step.h"
#include "core/booster/step_hooks.h"
#include "core/common/options.h"
#include "core/dist/parallel_dims.h"
#include "core/parallel/context.h"
#include "core/parallel/pipeline/runner.h"

namespace colossal::booster {

/// A model as a plugin hands it back: the per-step hooks (step_hooks.h), how its state maps
/// onto checkpoint files (checkpoint_layout.h) and, under pipeline parallelism, the pipeline's
/// step. A plugin that adds an axis around another (hybrid) reuses the inner plugin's hooks and
/// store and sets the layout's split; nothing forwards by hand.
class ModelWrapper {
 public:
  ModelWrapper(std::string plugin_name, std::shared_ptr<StepHooks> hooks, CheckpointLayout checkpoint,
               std::unique_ptr<PipelineStep> pipeline = nullptr);
  StepHooks& hooks() { return *hooks_; }
  const StepHooks& hooks() const { return *hooks_; }
  CheckpointLayout& checkpoint() { return checkpoint_; }
  const CheckpointLayout& checkpoint() const { return checkpoint_; }
  const std::string& plugin_name() const { return plugin_name_; }
  /// The hooks, to share with a wrapper that adds an axis around them.
  std::shared_ptr<StepHooks> shared_hooks() const { return hooks_; }

  /// One training step of a pipeline-parallel model (its forward, backward and gradient
  /// synchronisation over the microbatches); returns the loss on every rank. Without a
  /// pipeline axis: an error naming the plugin.
  double execute_pipeline(const parallel::pipeline::StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                          const std::vector<torch::Tensor>& targets);
  /// The pipeline's forward only (evaluation): the mean loss over the microbatches, every rank.
  double evaluate_pipeline(const parallel::pipeline::StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                           const std::vector<torch::Tensor>& targets);

 private:
  std::string plugin_name_;
  std::shared_ptr<StepHooks> hooks_;
  CheckpointLayout checkpoint_;
  std::unique_ptr<PipelineStep> pipeline_;
};

/// The wrapper of a plugin whose one object is both its step hooks and its state store.
template <class T>
std::unique_ptr<ModelWrapper> wrap_whole(std::shared_ptr<T> model) {
  std::shared_ptr<StateStore> store = model;
  auto name = model->plugin_name();
  return std::make_unique<ModelWrapper>(std::move(name), std::move(model), CheckpointLayout(std::move(store)));
}

/// What every plugin is built with.
struct PluginEnvironment {
  std::shared_ptr<const dist::ParallelDims> dims;  // null: pure data parallelism over the world
  c10::Device device = c10::kCPU;                  // where parameters, gradients and buckets live
  amp::Fp8LinearOptions fp8;                       // --mixed_precision fp8: the linear layers' scaling
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
  /// Whether --mixed_precision fp8 runs under this plugin (its linear layers in FP8, the rest
  /// as bf16 with fp32 masters).
  virtual bool supports_fp8() const { return false; }
  const amp::Fp8LinearOptions& fp8_options() const { return env_.fp8; }
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

  /// Prepares `model` (in place: hooks, broadcasts, casts) and returns it wrapped.
  virtual std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model,
                                                   torch::optim::Optimizer& optimizer) = 0;

 private:
  PluginEnvironment env_;
  mutable std::shared_ptr<const dist::ParallelDims> dims_;
};

}  // namespace colossal::booster
