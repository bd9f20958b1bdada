#include <cmath>
#include "core/booster/plugins/ddp/ddp_plugin.h"

#include <torch/torch.h>

#include <map>
#include <set>

#include "core/amp/mixed_precision.h"
#include "core/parallel/data/model_sync.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::booster {
namespace {

struct AllReduceBucket {
  torch::Tensor flat;             // all gradients of the bucket, contiguous
  std::vector<size_t> params;     // indices into DDPModel::params_
  bool expert = false;            // expert parameters (reduced over the expert data-parallel group)
  size_t pending = 0;             // gradients not yet ready in this backward
  dist::Handle handle;            // the in-flight all-reduce
};

class DDPModel : public StepHooks, public StateStore {
 public:
  DDPModel(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
           const DDPPlugin::Options& options, const c10::Device& device)
      : StepHooks("ddp"), options_(options) {
    COLOSSAL_CHECK(dist::is_initialized(), "[ddp] call colossal::dist::init() before boosting");
    group_ = options_.scope.resolved_group();
    collect_parameters(model, optimizer);
    parallel::broadcast_model_state(model, group_, options_.broadcast_buffers, options_.scope.expert_parameters,
                                    options_.scope.expert_group);
    if (options_.precision != "fp32") {
      mixed_.emplace(amp::parse_precision(options_.precision), device,
                     options_.loss_scaler);
      mixed_->wrap(model, optimizer);
    }
    // One rank has nothing to synchronise: gradients stay where autograd puts them (no buckets,
    // no copies, no hooks), as plain LibTorch training would have them.
    local_ = group_.size() == 1;
    if (!local_) {
      build_buckets();
      install_hooks();
    }
  }

  void before_backward() override {
    if (local_) return;
    reattach_gradients(/*keep_detached=*/true);
    for (auto& b : buckets_) {
      b.pending = b.params.size();
    }
    std::fill(ready_.begin(), ready_.end(), false);
    next_launch_ = 0;
    in_backward_ = true;
  }

  void after_backward() override {
    in_backward_ = false;
    if (local_) {
      if (mixed_) mixed_->prepare_grads(group_);
      return;
    }
    if (!sync_) return;
    std::vector<std::string> missing;
    for (auto& b : buckets_) {
      if (b.pending == 0) continue;
      for (size_t i : b.params)
        if (!ready_[i]) missing.push_back(names_[i]);
    }
    if (!missing.empty()) {
      if (!options_.find_unused_parameters) {
        std::string list;
        for (size_t i = 0; i < missing.size() && i < 10; ++i) list += (i ? ", " : "") + missing[i];
        if (missing.size() > 10) list += ", ... (" + std::to_string(missing.size()) + " in all)";
        COLOSSAL_FAIL("[ddp] these parameters got no gradient in this step: ", list,
                      ". Either every parameter takes part in the loss, or create the plugin "
                      "with find_unused_parameters = true");
      }
      for (auto& b : buckets_) {
        b.pending = 0;
      }
      launch_ready_buckets();
    }
    for (auto& b : buckets_) b.handle.wait();
    if (mixed_) mixed_->prepare_grads(group_);
  }

  double loss_scale() const override { return mixed_ ? mixed_->loss_scale() : 1.0; }
  c10::ScalarType compute_dtype() const override {
    return mixed_ ? mixed_->compute_dtype() : c10::kFloat;
  }
  checkpoint::NamedTensors model_state(const torch::nn::Module& model, bool trainable_only) const override {
    auto state = StateStore::model_state(model, trainable_only);
    if (mixed_) {
      for (auto& [name, t] : state) t = mixed_->master_of(t);
    }
    return state;
  }

  std::map<std::string, double> extra_state() const override {
    if (mixed_ && mixed_->scaler()) return mixed_->scaler()->state_dict();
    return {};
  }
  void load_extra_state(const std::map<std::string, double>& state) override {
    if (mixed_ && mixed_->scaler() && !state.empty()) mixed_->scaler()->load_state_dict(state);
  }

  void after_load() override {
    if (mixed_) mixed_->refresh_working_from_masters();
  }

  bool optimizer_step(torch::optim::Optimizer& optimizer) override {
    if (!mixed_) {
      optimizer.step();
      return true;
    }
    return mixed_->step(optimizer);
  }

  // Under tensor parallelism the norm also sums the slices other tp ranks hold, under pipeline
  // parallelism the other stages' parameters (scope.h).
  double clip_grad_norm(torch::optim::Optimizer& optimizer, double max_norm, double norm_type) override {
    const auto& scope = options_.scope;
    if (!scope.norm_spans_ranks())
      return mixed_ ? mixed_->clip_grad_norm(optimizer, max_norm, norm_type)
                    : StepHooks::clip_grad_norm(optimizer, max_norm, norm_type);
    torch::NoGradGuard no_grad;
    const bool inf_norm = std::isinf(norm_type);
    std::vector<torch::Tensor> owners;  // the tensors whose gradients are scaled
    double local = 0, local_expert = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      auto owner = mixed_ ? mixed_->master_of(params_[i]) : params_[i];
      auto g = owner.grad();
      if (!g.defined()) continue;
      owners.push_back(owner);
      if (!scope.counts_in_norm(names_[i])) continue;
      double n = torch::linalg_vector_norm(g, norm_type, {}, false, torch::kFloat64).item<double>();
      double& into = scope.is_expert(names_[i]) ? local_expert : local;
      into = inf_norm ? std::max(into, n) : into + std::pow(n, norm_type);
    }
    double total = scope.combine_over_norm_group(local, inf_norm, local_expert);
    if (!inf_norm) total = std::pow(total, 1.0 / norm_type);
    // As torch::nn::utils::clip_grad_norm_: the coefficient in fp32, applied (a factor of 1 changes
    // no bit, so it is skipped; a handed-over bf16 gradient becomes the fp32 one, scaled).
    float coef = std::min(1.0f, static_cast<float>(max_norm) / (static_cast<float>(total) + 1e-6f));
    for (auto& owner : owners) amp::MixedPrecision::scale_master_grad(owner, coef);
    return total;
  }

  void set_gradient_sync(bool enabled) override { sync_ = enabled; }
  bool gradient_sync() const override { return sync_; }

  // Zeroing is lazy: gradients are dropped here, backward then hands each parameter a fresh
  // gradient and the ready hook copies it into the bucket (one read and one write) instead of
  // adding it to a zero-filled bucket (a write, then two reads and a write). Parameters that get
  // no gradient have their bucket segment zeroed before the bucket is reduced.
  void zero_grad(torch::optim::Optimizer& optimizer) override {
    if (local_) {
      optimizer.zero_grad(/*set_to_none=*/true);
      return;
    }
    for (size_t i = 0; i < params_.size(); ++i) {
      params_[i].mutable_grad() = torch::Tensor();
      detached_[i] = true;
    }
  }

 private:
  void collect_parameters(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
    std::set<const void*> in_optimizer;
    for (const auto& g : optimizer.param_groups())
      for (const auto& p : g.params()) in_optimizer.insert(p.unsafeGetTensorImpl());
    auto named = model.named_parameters(/*recurse=*/true);
    // Reverse registration order approximates the order backward produces gradients.
    for (auto it = named.end(); it != named.begin();) {
      --it;
      if (!it->value().requires_grad()) continue;
      params_.push_back(it->value());
      names_.push_back(it->key());
      in_optimizer.erase(it->value().unsafeGetTensorImpl());
    }
    COLOSSAL_CHECK(in_optimizer.empty(), "[ddp] the optimizer holds ", in_optimizer.size(),
                   " tensor(s) that are not trainable parameters of the model being boosted");
    COLOSSAL_CHECK(!params_.empty(), "[ddp] the model has no trainable parameters");
    ready_.assign(params_.size(), false);
    detached_.assign(params_.size(), false);
  }

  void build_buckets() {
    size_t i = 0;
    while (i < params_.size()) {
      AllReduceBucket b;
      auto dtype = params_[i].scalar_type();
      // Dense and expert parameters never share a bucket: they are reduced over different groups.
      // Every rank holds the same number of experts of the same shapes, so the buckets line up.
      b.expert = options_.scope.is_expert(names_[i]);
      int64_t bytes = 0, numel = 0;
      while (i < params_.size() && params_[i].scalar_type() == dtype &&
             options_.scope.is_expert(names_[i]) == b.expert && (b.params.empty() || bytes < options_.bucket_bytes)) {
        b.params.push_back(i);
        numel += params_[i].numel();
        bytes += params_[i].numel() * params_[i].element_size();
        ++i;
      }
      b.flat = torch::zeros({numel}, params_[b.params.front()].options().requires_grad(false));
      buckets_.push_back(std::move(b));
    }
    bucket_of_.assign(params_.size(), 0);
    offset_of_.assign(params_.size(), 0);
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
      int64_t off = 0;
      for (size_t pi : buckets_[bi].params) {
        bucket_of_[pi] = bi;
        offset_of_[pi] = off;
        off += params_[pi].numel();
      }
    }
    reattach_gradients();
  }

  torch::Tensor view_of(size_t i) {
    return buckets_[bucket_of_[i]].flat.narrow(0, offset_of_[i], params_[i].numel())
        .view(params_[i].sizes());
  }

  // Each parameter's .grad() must be its bucket view. Someone may have reset it (set_to_none,
  // model->zero_grad()) or replaced it: restore the view, keeping any gradient it held.
  // `keep_detached`: parameters zeroed lazily by zero_grad stay without a gradient.
  void reattach_gradients(bool keep_detached = false) {
    for (size_t i = 0; i < params_.size(); ++i) {
      auto& p = params_[i];
      const auto& g = p.grad();
      if (keep_detached && detached_[i] && !g.defined()) continue;
      attach(i);
    }
  }

  // Makes params_[i].grad() its bucket view holding the gradient it had (zero when none).
  void attach(size_t i) {
    auto& p = params_[i];
    auto view = view_of(i);
    const auto& g = p.grad();
    detached_[i] = false;
    if (g.defined() && g.data_ptr() == view.data_ptr()) return;
    torch::NoGradGuard no_grad;
    if (g.defined()) view.copy_(g);
    else view.zero_();
    p.mutable_grad() = view;
  }

  void install_hooks() {
    accumulators_ = parallel::add_gradient_ready_hooks(params_, names_, "ddp", [this](size_t i) { on_gradient_ready(i); });
  }

  void on_gradient_ready(size_t i) {
    if (detached_[i] || !params_[i].grad().is_alias_of(buckets_[bucket_of_[i]].flat)) attach(i);
    if (!sync_ || !in_backward_ || ready_[i]) return;
    ready_[i] = true;
    AllReduceBucket& b = buckets_[bucket_of_[i]];
    if (--b.pending == 0) launch_ready_buckets();
  }

  // Launches complete buckets strictly in index order, so every rank issues the same sequence.
  void launch_ready_buckets() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      AllReduceBucket& b = buckets_[next_launch_++];
      for (size_t i : b.params)
        if (detached_[i]) attach(i);  // no gradient this step: reduce zeros
      b.handle = options_.scope.reduce_async(b.flat, b.expert);
    }
  }

  DDPPlugin::Options options_;
  std::optional<amp::MixedPrecision> mixed_;
  dist::Group group_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<bool> ready_;
  std::vector<bool> detached_;  // gradient dropped by zero_grad, bucket segment stale
  std::vector<AllReduceBucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<int64_t> offset_of_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  size_t next_launch_ = 0;
  bool sync_ = true;
  bool in_backward_ = false;
  bool local_ = false;  // a world of one: no buckets, no hooks
};

}  // namespace

void DDPPlugin::Options::validate() const {
  COLOSSAL_CHECK(bucket_bytes > 0, "[ddp] bucket_bytes: expected > 0, got ", bucket_bytes);
  (void)amp::parse_precision(precision);
  loss_scaler.validate();
}

DDPPlugin::DDPPlugin(Options options, PluginEnvironment env) : Plugin(std::move(env)), options_(std::move(options)) {
  options_.validate();
}

std::unique_ptr<ModelWrapper> DDPPlugin::wrap_model(torch::nn::Module& model,
                                                    torch::optim::Optimizer& optimizer) {
  COLOSSAL_CHECK(dist::is_initialized(), "[ddp] call colossal::dist::init() before boosting");
  auto o = options_;
  if (!o.scope.group.is_member()) o.scope.group = dims().gradient_group();
  return wrap_whole(std::make_shared<DDPModel>(model, optimizer, o, device()));
}

}  // namespace colossal::booster
