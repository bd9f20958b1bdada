#pragma once
// What a plugin installs on a model for training: the per-step hooks the Booster calls around
// backward and the optimizer step. Every hook has a correct single-process default; a hook a
// plugin cannot honour throws with the plugin's name. How the model's state maps onto
// checkpoint files is the other half of a wrapped model (checkpoint_layout.h).
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <string>

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

class StepHooks {
 public:
  virtual ~StepHooks() = default;
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
  /// Zeroes gradients in whatever storage the plugin keeps them.
  virtual void zero_grad(torch::optim::Optimizer& optimizer) { optimizer.zero_grad(); }
  /// Clips gradients to a global norm across every rank holding a part of them; returns the
  /// total norm before clipping. max_norm = infinity only measures.
  virtual double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type);
  /// Model-state memory of this rank. The default counts distinct storages of the model's
  /// parameters and gradients, the optimizer's tensors that are not model parameters (fp32
  /// masters) and the optimizer's state.
  virtual MemoryReport memory_report(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer) const;
  /// Step state that checkpoints carry (the fp16 loss scaler).
  virtual std::map<std::string, double> extra_state() const { return {}; }
  virtual void load_extra_state(const std::map<std::string, double>&) {}

  const std::string& plugin_name() const { return plugin_name_; }

 protected:
  explicit StepHooks(std::string plugin_name) : plugin_name_(std::move(plugin_name)) {}

 private:
  std::string plugin_name_;
};

/// The norm of every gradient the optimizer holds, as one fused reduction (no host round trip
/// per tensor); scales them by max_norm / norm when that is below 1 (as
/// torch::nn::utils::clip_grad_norm_, whose coefficient it uses) and leaves them untouched
/// otherwise. Returns the norm before clipping.
double clip_local_gradients(torch::optim::Optimizer& optimizer, double max_norm, double norm_type);

}  // namespace colossal::booster
