#include "core/booster/plugins/gemini/gemini_plugin.h"

#include <torch/torch.h>

#include "core/amp/precision.h"
#include "core/common/check.h"
#include "core/dist/runtime.h"
#include "core/nn/deferred_init.h"
#include "core/nn/module_hooks.h"
#include "core/parallel/data/model_sync.h"
#include "core/zero/chunk_manager.h"
#include "core/zero/master_shards.h"
#include "core/zero/placement_policy.h"

namespace colossal::booster {
using namespace colossal::zero;  // the ZeRO mechanism this plugin drives

namespace {

// A module with hooks: the managed parameters it owns and their distinct chunks, the frozen
// ones apart (computed once).
struct HookedModule {
  std::vector<size_t> params, chunks, frozen_chunks;
};

// The plugin glue: forward hooks gather a module's chunks before it runs and release them
// after (as the placement policy says), gradient hooks feed the chunks' reductions, and the
// training-step protocol (backward, clipping, the step, checkpoints) runs over the chunk
// manager's shards.
class GeminiModel : public StepHooks, public StateStore {
 public:
  GeminiModel(torch::nn::Module& model, torch::optim::Optimizer& optimizer, const GeminiPlugin::Options& options,
              dist::Group group, const c10::Device& device)
      : StepHooks("gemini"),
        device_(device),
        compute_dtype_(amp::compute_dtype(amp::parse_precision(options.precision), device)),
        policy_({.placement = options.placement,
                 .shard_param_frac = options.shard_param_frac,
                 .offload_optim_frac = options.offload_optim_frac,
                 .offload_param_frac = options.offload_param_frac,
                 .gathered_budget_bytes = options.gathered_budget_bytes,
                 .prefetch = options.prefetch}),
        chunks_({.chunk_elements = options.chunk_elements,
                 .keep_gathered_below = options.keep_gathered_below,
                 .search = options.chunk_search,
                 .offload_device = options.offload_device,
                 .nvme_dir = options.nvme_dir,
                 .compute_dtype = compute_dtype_,
                 .device = device},
                group),
        shards_(group, amp::parse_precision(options.precision) == amp::Precision::kFp16
                           ? std::optional<amp::DynamicLossScaler>(options.loss_scaler)
                           : std::nullopt) {
    chunks_.collect(model, optimizer);
    parallel::broadcast_model_state(model, group);  // a lazily built model: its seed
    // Frozen parameters (a LoRA run's base) get chunks of their own: sharded and gathered for
    // compute like the rest, never reduced or stepped.
    auto* init = dynamic_cast<nn::ParameterInitializer*>(&model);
    chunks_.build(policy_, shards_, optimizer, /*keep_all_gathered=*/options.check_first_step, init);
    if (init) init->parameters_materialized();
    {
      torch::NoGradGuard no_grad;
      for (auto& b : model.buffers())
        if (b.is_floating_point() && compute_dtype_ != c10::kFloat) b.set_data(b.detach().to(compute_dtype_));
    }
    shards_.bind(optimizer, [this](const torch::Tensor& p) { return chunks_.slice_of(p); });
    install_module_hooks(model, "");
    install_gradient_hooks();
    first_step_ = options.check_first_step;
    if (!first_step_) release_unpinned();
  }

  ~GeminiModel() override {
    for (int64_t id : hook_ids_) nn::remove_forward_hooks(id);
  }

  // ---- backward -------------------------------------------------------------------------
  void before_backward() override {
    for (auto& c : chunks_.chunks()) c.ready = 0;
    in_backward_ = true;
  }

  void after_backward() override {
    in_backward_ = false;
    auto& chunks = chunks_.chunks();
    // Parameters without a gradient contribute zeros; chunks go out in index order.
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      auto& c = chunks[ci];
      if (c.frozen) {  // backward is over: whatever still computes is done
        frozen_chunk_done(ci);
        continue;
      }
      if (c.ready == static_cast<int64_t>(c.params.size())) continue;
      for (size_t pi : c.params) {
        auto& p = chunks_.params()[pi];
        if (p.state == TensorState::kHold || p.state == TensorState::kCompute)
          chunks_.set_state(p, TensorState::kReadyForReduce);
      }
      c.ready = static_cast<int64_t>(c.params.size());
      reduce(ci);
    }
    chunks_.drain_reductions(0);
    if (first_step_) {
      first_step_ = false;
      if (!used_outside_call_.empty()) {
        std::string list;
        for (size_t i = 0; i < used_outside_call_.size() && i < 10; ++i) list += (i ? ", " : "") + used_outside_call_[i];
        COLOSSAL_FAIL("[gemini] these parameters were used without colossal::nn::call around their "
                      "module, so they cannot be gathered on demand: ", list,
                      ". Run each module that owns parameters as colossal::nn::call(module, ...) (C++), or "
                      "call the module itself instead of reading its parameters from outside its forward (Python)");
      }
      release_unpinned();
    }
    policy_.end_step();
    reset_usage();
    std::fill(backward_users_.begin(), backward_users_.end(), 0);
    chunks_.bind_master_grads(shards_);
    shards_.prepare_grads();
  }

  c10::ScalarType compute_dtype() const override { return compute_dtype_; }
  double loss_scale() const override { return shards_.loss_scale(); }

  void zero_grad(torch::optim::Optimizer&) override {
    torch::NoGradGuard no_grad;
    for (auto& c : chunks_.chunks())
      if (c.grad_shard.defined() && !nn::is_deferred(c.grad_shard)) c.grad_shard.zero_();
    for (auto& p : chunks_.params()) p.param.mutable_grad() = torch::Tensor();
    for (auto& s : shards_.slices()) s.master.mutable_grad() = torch::Tensor();
  }

  double clip_grad_norm(torch::optim::Optimizer&, double max_norm, double norm_type) override {
    return shards_.clip_grad_norm(max_norm, norm_type);
  }

  bool optimizer_step(torch::optim::Optimizer& optimizer) override {
    bool ran = shards_.step(optimizer);
    if (ran && chunks_.offloads()) chunks_.stream_optimizer_step(optimizer, shards_.streamed_grad_multiplier());
    chunks_.after_step(ran);
    release_unpinned();  // gathered copies are stale now
    reset_usage();
    return ran;
  }

  // ---- checkpoints ----------------------------------------------------------------------
  checkpoint::NamedTensors model_state(const torch::nn::Module& model, bool trainable_only) const override {
    torch::NoGradGuard no_grad;
    auto state = StateStore::model_state(model, trainable_only);
    std::map<std::string, size_t> pos;
    for (size_t i = 0; i < state.size(); ++i) pos[state[i].first] = i;
    const auto& chunks = chunks_.chunks();
    gathered_.assign(chunks.size(), torch::Tensor());
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      if (chunks[ci].frozen && trainable_only) continue;
      // Gathered on the device (NCCL moves device memory), wherever the masters live.
      auto mine = chunks_.read_master(ci).to(device_).contiguous();
      auto full = torch::empty({chunks[ci].elements}, mine.options());
      dist::all_gather(full, mine, chunks_.group());
      gathered_[ci] = full;
      for (size_t pi : chunks[ci].params) {
        const auto& p = chunks_.params()[pi];
        auto it = pos.find(p.name);
        if (it != pos.end()) state[it->second].second = full.narrow(0, p.offset, p.numel).view(p.shape);
      }
    }
    return state;
  }

  void after_load() override {
    for (size_t ci = 0; ci < gathered_.size() && ci < chunks_.chunks().size(); ++ci)
      if (gathered_[ci].defined()) chunks_.write_full(ci, gathered_[ci]);
    gathered_.clear();
  }

  std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module&) const override {
    return shards_.checkpoint_slices();
  }
  const dist::Group* shard_group() const override { return &chunks_.group(); }

  checkpoint::NamedTensors external_optimizer_state(std::map<std::string, std::string>* metadata) const override {
    return chunks_.streamed_state(metadata);
  }
  void load_external_optimizer_state(const checkpoint::OptimizerStateSource& source) override {
    chunks_.load_streamed_state(source);
  }

  MemoryReport memory_report(const torch::nn::Module& model, const torch::optim::Optimizer& optimizer) const override {
    MemoryReport r;
    const int64_t elem = c10::elementSize(compute_dtype_);
    for (const auto& c : chunks_.chunks()) {
      const int64_t shard_bytes = c.shard_elements * elem, master_bytes = c.shard_elements * 4;
      const std::string param_tier = chunks_.tier_label(c.param_tier), optim_tier = chunks_.tier_label(c.optim_tier);
      r.add("parameters", param_tier, shard_bytes);
      if (c.frozen) continue;
      if (!nn::is_deferred(c.grad_shard))  // memory only after the first backward
        r.add("gradients", c.nvme_optim() ? "host" : optim_tier,
              c.grad_shard.numel() * static_cast<int64_t>(c.grad_shard.element_size()));
      if (c.nvme_optim()) {
        r.add("master weights", "nvme", master_bytes);
        r.add("optimizer state", "nvme", 2 * master_bytes);
      } else if (!c.master.is_same(c.shard)) {
        r.add("master weights", optim_tier, master_bytes);
      }
    }
    r.add("gathered chunks", chunks_.tier_label(Tier::kDevice), chunks_.gathered_bytes());
    auto generic = StepHooks::memory_report(model, optimizer);
    for (const auto& [tier, n] : generic.bytes["optimizer state"]) r.add("optimizer state", tier, n);
    r.counters["chunks"] = static_cast<double>(chunks_.chunks().size());
    r.counters["chunk_elements"] = static_cast<double>(chunks_.chunk_elements());
    r.counters["gathers"] = static_cast<double>(chunks_.gathers);
    r.counters["prefetches"] = static_cast<double>(chunks_.prefetches);
    r.counters["evictions"] = static_cast<double>(chunks_.evictions);
    r.counters["peak_gathered_bytes"] = static_cast<double>(chunks_.peak_gathered_bytes);
    r.counters["tier_copies"] = static_cast<double>(chunks_.transfers().copies());
    r.counters["tier_copy_bytes"] = static_cast<double>(chunks_.transfers().bytes());
    if (const auto* nvme = chunks_.nvme()) {
      r.counters["nvme_bytes_read"] = static_cast<double>(nvme->bytes_read());
      r.counters["nvme_bytes_written"] = static_cast<double>(nvme->bytes_written());
      r.counters["nvme_prefetch_reads"] = static_cast<double>(chunks_.nvme_prefetch_reads);
    }
    return r;
  }

  std::map<std::string, double> extra_state() const override { return shards_.scaler_state(); }
  void load_extra_state(const std::map<std::string, double>& state) override { shards_.load_scaler_state(state); }

 private:
  // Hooks on every module that directly owns managed parameters.
  void install_module_hooks(torch::nn::Module& module, const std::string& prefix) {
    std::vector<size_t> own;
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      const int64_t i = chunks_.index_of(prefix + item.key());
      if (i >= 0) own.push_back(static_cast<size_t>(i));
    }
    if (!own.empty()) {
      auto unit = std::make_shared<HookedModule>();
      unit->params = own;
      for (size_t pi : own) {
        const size_t ci = chunks_.params()[pi].chunk;
        if (std::find(unit->chunks.begin(), unit->chunks.end(), ci) != unit->chunks.end()) continue;
        unit->chunks.push_back(ci);
        if (chunks_.chunks()[ci].frozen) unit->frozen_chunks.push_back(ci);
      }
      nn::ForwardHooks hooks;
      hooks.pre = [this, unit](const std::vector<torch::Tensor>& inputs) {
        access(*unit);
        watch_frozen_backward(unit, inputs);
      };
      hooks.post = [this, unit](const std::vector<torch::Tensor>& outputs) { post_forward(unit, outputs); };
      hook_ids_.push_back(nn::set_forward_hooks(module, std::move(hooks)));
    }
    for (const auto& child : module.named_children()) install_module_hooks(*child.value(), prefix + child.key() + ".");
  }

  void install_gradient_hooks() {
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    std::vector<size_t> index;  // hook argument -> managed parameter
    for (size_t i = 0; i < chunks_.params().size(); ++i) {
      const auto& p = chunks_.params()[i];
      if (p.frozen) continue;
      params.push_back(p.param);
      names.push_back(p.name);
      index.push_back(i);
    }
    accumulators_ = parallel::add_gradient_ready_hooks(params, names, "gemini", [this, index](size_t i) {
      if (in_backward_) gradient_ready(index[i]);
    });
    backward_users_.assign(chunks_.chunks().size(), 0);
  }

  // A frozen chunk has no gradient to say when the backward that needed it is over. The
  // module's inputs do: their gradients are complete only after every module reading them ran
  // its backward (which uses the frozen weights). Each forward with autograd on counts the
  // module as a user of its frozen chunks until then; the last one done releases the chunk
  // (static placement). A module whose inputs need no gradient keeps its chunks gathered until
  // the end of backward.
  void watch_frozen_backward(const std::shared_ptr<HookedModule>& unit, const std::vector<torch::Tensor>& inputs) {
    if (unit->frozen_chunks.empty() || !torch::GradMode::is_enabled()) return;
    bool watched = false;
    auto fired = std::make_shared<bool>(false);
    for (const auto& in : inputs) {
      if (!in.defined() || !in.requires_grad()) continue;
      watched = true;
      in.register_hook([this, unit, fired](const torch::Tensor& g) {
        if (!*fired && in_backward_) {
          *fired = true;
          frozen_backward_done(*unit);
        }
        return g;
      });
    }
    if (!watched) return;
    for (size_t ci : unit->frozen_chunks) ++backward_users_[ci];
  }

  void frozen_backward_done(const HookedModule& unit) {
    for (size_t ci : unit.frozen_chunks) {
      if (backward_users_[ci] > 0) --backward_users_[ci];
      if (backward_users_[ci] == 0) frozen_chunk_done(ci);
    }
  }

  // No backward needs frozen chunk `ci` any more: its parameters rest, and static placement
  // releases it.
  void frozen_chunk_done(size_t ci) {
    for (size_t pi : chunks_.chunks()[ci].params)
      if (chunks_.params()[pi].state == TensorState::kCompute)
        chunks_.set_state(chunks_.params()[pi], TensorState::kHold);
    const auto& c = chunks_.chunks()[ci];
    if (!first_step_ && policy_.releases_after_use() && !c.keep_gathered && chunks_.releasable(ci)) chunks_.release(ci);
  }

  void reset_usage() {
    for (auto& p : chunks_.params()) p.used = false;
    for (auto& c : chunks_.chunks()) c.used = 0;
  }

  // ---- gather / release -----------------------------------------------------------------
  void access(const HookedModule& unit) {
    chunks_.launch_loaded();  // shards prefetched from NVMe: their all-gathers start now
    for (size_t ci : unit.chunks) {
      policy_.note_access(ci);
      if (!chunks_.chunks()[ci].gathered && !chunks_.chunks()[ci].gathering) make_room(ci);
      chunks_.gather(ci);
    }
    for (size_t pi : unit.params) {
      auto& p = chunks_.params()[pi];
      if (p.state == TensorState::kHoldAfterBwd) chunks_.set_state(p, TensorState::kHold);
      chunks_.set_state(p, TensorState::kCompute);
    }
    prefetch();
  }

  void post_forward(const std::shared_ptr<HookedModule>& unit, const std::vector<torch::Tensor>& outputs) {
    for (size_t pi : unit->params) {
      auto& p = chunks_.params()[pi];
      chunks_.set_state(p, TensorState::kHold);
      if (!p.used) {
        p.used = true;
        ++chunks_.chunks()[p.chunk].used;
      }
    }
    if (!first_step_ && policy_.releases_after_use()) {
      // Released once every parameter in it has run (a chunk usually spans several modules),
      // unless the recorded order says it is needed again right away.
      for (size_t ci : unit->chunks) {
        const auto& c = chunks_.chunks()[ci];
        const bool all_used = c.used == static_cast<int64_t>(c.params.size());
        if (!c.keep_gathered && all_used && !policy_.next_access_is(ci) && chunks_.releasable(ci)) chunks_.release(ci);
      }
    }
    if (!torch::GradMode::is_enabled()) return;
    // Before this module's backward runs, its chunks are gathered again.
    auto fired = std::make_shared<bool>(false);
    for (const auto& out : outputs) {
      if (!out.defined() || !out.requires_grad()) continue;
      out.register_hook([this, unit, fired](const torch::Tensor& g) {
        if (!*fired && in_backward_) {
          *fired = true;
          access(*unit);
        }
        return g;
      });
    }
  }

  void release_unpinned() {
    for (size_t ci = 0; ci < chunks_.chunks().size(); ++ci)
      if (!chunks_.chunks()[ci].keep_gathered && chunks_.releasable(ci)) chunks_.release(ci);
  }

  // auto placement: release cached chunks, furthest next use first, until chunk `wanted` fits.
  void make_room(size_t wanted) {
    const int64_t bytes = chunks_.chunks()[wanted].bytes();
    while (!policy_.fits(chunks_.gathered_bytes(), bytes)) {
      std::vector<size_t> candidates;
      for (size_t ci = 0; ci < chunks_.chunks().size(); ++ci)
        if (ci != wanted && !chunks_.chunks()[ci].keep_gathered && chunks_.releasable(ci)) candidates.push_back(ci);
      auto v = policy_.victim(candidates, [this](size_t ci) { return chunks_.chunks()[ci].last_use; });
      if (!v) return;  // everything gathered is in use: go over budget
      chunks_.release(*v);
      ++chunks_.evictions;
    }
  }

  // Starts gathering the next chunks of the recorded order. Every rank follows the same order,
  // so the collectives match.
  void prefetch() {
    if (first_step_) return;
    for (size_t ci : policy_.upcoming()) {
      const auto& c = chunks_.chunks()[ci];
      if (c.gathered || c.gathering) continue;
      if (!policy_.fits(chunks_.gathered_bytes(), c.bytes())) break;
      chunks_.start_gather(ci);
    }
  }

  // ---- gradients ------------------------------------------------------------------------
  void gradient_ready(size_t i) {
    auto& p = chunks_.params()[i];
    if (first_step_ && p.state == TensorState::kHold) used_outside_call_.push_back(p.name);
    if (chunks_.accumulate_gradient(i)) reduce(p.chunk);
  }

  void reduce(size_t ci) {
    chunks_.reduce(ci);
    const auto& c = chunks_.chunks()[ci];
    if (!first_step_ && policy_.releases_after_use() && !c.keep_gathered && chunks_.releasable(ci)) chunks_.release(ci);
    chunks_.drain_reductions(2);
  }

  c10::Device device_;
  c10::ScalarType compute_dtype_;
  PlacementPolicy policy_;
  ChunkManager chunks_;
  MasterShards shards_;
  std::vector<int64_t> hook_ids_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  bool first_step_ = true;
  bool in_backward_ = false;
  std::vector<int64_t> backward_users_;  // per chunk: modules whose backward still needs it (frozen chunks)
  std::vector<std::string> used_outside_call_;
  mutable std::vector<torch::Tensor> gathered_;  // model_state -> after_load
};

}  // namespace

void GeminiPlugin::Options::validate() const {
  (void)amp::parse_precision(precision);
  COLOSSAL_CHECK(placement == "static" || placement == "auto",
                 "[gemini] placement: expected static or auto, got '", placement, "'");
  for (auto [name, v] : {std::pair{"shard_param_frac", shard_param_frac},
                         std::pair{"offload_optim_frac", offload_optim_frac},
                         std::pair{"offload_param_frac", offload_param_frac}})
    COLOSSAL_CHECK(v >= 0 && v <= 1, "[gemini] ", name, ": expected a fraction in [0, 1], got ", v);
  COLOSSAL_CHECK(offload_device == "cpu" || offload_device == "nvme",
                 "[gemini] offload_device: expected cpu or nvme, got '", offload_device, "'");
  COLOSSAL_CHECK(offload_param_frac <= offload_optim_frac, "[gemini] offload_param_frac (",
                 offload_param_frac, ") must not exceed offload_optim_frac (", offload_optim_frac,
                 "): a chunk's parameters are offloaded together with its optimizer state");
  COLOSSAL_CHECK(offload_device != "nvme" || !nvme_dir.empty(),
                 "[gemini] offload_device nvme needs nvme_dir (a directory for the offload files)");
  COLOSSAL_CHECK(gathered_budget_bytes > 0, "[gemini] gathered_budget_mib: expected > 0");
  COLOSSAL_CHECK(prefetch >= 0, "[gemini] prefetch: expected >= 0, got ", prefetch);
  COLOSSAL_CHECK(keep_gathered_below >= 0, "[gemini] keep_gathered_below: expected >= 0, got ",
                 keep_gathered_below);
  loss_scaler.validate();
}

GeminiPlugin::GeminiPlugin(Options options, PluginEnvironment env)
    : Plugin(std::move(env)), options_(std::move(options)) {
  options_.validate();
}

std::unique_ptr<ModelWrapper> GeminiPlugin::wrap_model(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
  COLOSSAL_CHECK(dist::is_initialized(), "[gemini] call colossal::dist::init() before boosting");
  return wrap_whole(std::make_shared<GeminiModel>(model, optimizer, options_, dims().gradient_group(), device()));
}

}  // namespace colossal::booster
