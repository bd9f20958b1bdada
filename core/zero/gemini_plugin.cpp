#include "core/zero/gemini_plugin.h"

#include <torch/torch.h>

#include <climits>
#include <deque>
#include <set>

#include "core/amp/precision.h"
#include "core/booster/wrap_helpers.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/nn/module_hooks.h"
#include "core/offload/nvme_store.h"
#include "core/optim/fused_adamw.h"
#include "core/zero/chunk_state.h"
#include "core/zero/master_shards.h"

namespace colossal::zero {
namespace {

using booster::ModelWrapper;

// A chunk's full buffer is gathered and released by giving its storage memory and taking it
// back; parameters stay views of it throughout (and so do tensors autograd saved from them,
// which therefore see the re-gathered values in backward).
void free_storage(const torch::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(at::DataPtr(nullptr, s->device()));
  s->set_nbytes(0);
}
void alloc_storage(const torch::Tensor& t, size_t nbytes) {
  auto* s = t.storage().unsafeGetStorageImpl();
  s->set_data_ptr_noswap(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

struct GParam {
  torch::Tensor param;
  std::string name;
  std::vector<int64_t> shape;
  size_t chunk = 0;
  int64_t offset = 0;  // in the chunk
  int64_t numel = 0;
  TensorState state = TensorState::kHold;
  size_t group = 0;  // the optimizer param group that held it
  bool used = false; // its module finished a forward in this pass
  int64_t slice = -1;         // index into MasterShards::slices(), -1: none on this rank
  int64_t slice_offset = 0;   // where that slice starts in the chunk's shard
};

// A module with hooks: the managed parameters it owns and their distinct chunks (computed once).
struct HookedModule {
  std::vector<size_t> params, chunks;
};

// A slice whose optimizer step is streamed from NVMe (not in the user's optimizer).
struct StreamedSlice {
  size_t param = 0, chunk = 0;
  int64_t param_offset = 0;  // first element of the parameter
  int64_t shard_offset = 0;  // where it sits in the chunk's shard
  int64_t len = 0;
};

struct Chunk {
  std::vector<size_t> params;
  int64_t elements = 0, shard_elements = 0;
  torch::Tensor data;        // the full chunk (compute dtype); no memory while released
  torch::Tensor shard;       // this rank's piece, persistent
  torch::Tensor master;      // fp32 piece the optimizer updates (== shard for fp32 in place)
  torch::Tensor grad;        // full gradients during backward
  torch::Tensor grad_shard;  // this rank's reduced gradients (accumulates)
  torch::Tensor reduce_out;
  dist::Handle gather_handle, reduce_handle;
  bool gathered = true, gathering = false;
  bool pinned = false;       // kept gathered
  bool nvme_optim = false;   // master and moments live in the NVMe store (streamed step)
  bool nvme_param = false;   // the parameter shard lives there too
  int64_t off_master = -1, off_m = -1, off_v = -1, off_shard = -1;
  int64_t optim_step = 0;    // streamed AdamW steps taken
  size_t streamed_begin = 0, streamed_end = 0;  // its slices in GeminiModel::streamed_
  torch::Tensor staging;     // shard read from NVMe for a gather in flight
  int64_t ready = 0;         // parameters whose gradient arrived in this backward
  int64_t used = 0;          // parameters whose module finished a forward in this pass
  int64_t last_use = 0;
  int64_t bytes() const { return elements * static_cast<int64_t>(data.element_size()); }
};

class GeminiModel : public ModelWrapper {
 public:
  GeminiModel(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
              const GeminiPlugin::Options& options)
      : ModelWrapper("gemini"),
        options_(options),
        group_(dist::world_group()),
        ranks_(group_.size()),
        rank_(group_.rank()),
        shards_(group_, amp::parse_precision(options.precision) == amp::Precision::kFp16
                            ? std::optional<amp::DynamicLossScaler>(options.loss_scaler)
                            : std::nullopt) {
    compute_dtype_ = amp::compute_dtype(amp::parse_precision(options_.precision), c10::Device(c10::kCPU));
    auto_placement_ = options_.placement == "auto";
    collect_parameters(model, optimizer);
    booster::broadcast_model_state(model, group_);
    build_chunks(model, optimizer);
    shards_.bind(optimizer, [this](const torch::Tensor& p) -> int64_t {
      auto it = slice_of_.find(p.unsafeGetTensorImpl());
      return it == slice_of_.end() ? -1 : it->second;
    });
    install_module_hooks(model, "");
    install_gradient_hooks();
    if (!options_.check_first_step) release_unpinned();
    first_step_ = options_.check_first_step;
  }

  ~GeminiModel() override {
    for (int64_t id : hook_ids_) nn::remove_forward_hooks(id);
  }

  // ---- backward -------------------------------------------------------------------------
  void before_backward() override {
    for (auto& c : chunks_) c.ready = 0;
    in_backward_ = true;
  }

  void after_backward() override {
    in_backward_ = false;
    // Parameters without a gradient contribute zeros; chunks go out in index order.
    for (size_t ci = 0; ci < chunks_.size(); ++ci) {
      auto& c = chunks_[ci];
      if (c.ready == static_cast<int64_t>(c.params.size())) continue;
      for (size_t pi : c.params) {
        auto& gp = params_[pi];
        if (gp.state == TensorState::kHold || gp.state == TensorState::kCompute) set_state(gp, TensorState::kReadyForReduce);
      }
      c.ready = static_cast<int64_t>(c.params.size());
      reduce_chunk(ci);
    }
    while (!reducing_.empty()) drain_oldest();
    if (first_step_) {
      first_step_ = false;
      if (!used_outside_call_.empty()) {
        std::string list;
        for (size_t i = 0; i < used_outside_call_.size() && i < 10; ++i)
          list += (i ? ", " : "") + used_outside_call_[i];
        COLOSSAL_FAIL("[gemini] these parameters were used without colossal::nn::call around their "
                      "module, so they cannot be gathered on demand: ", list,
                      ". Run each module that owns parameters as colossal::nn::call(module, ...)");
      }
      release_unpinned();
    }
    recording_ = false;
    cursor_ = 0;
    reset_usage();
    for (size_t ci = 0; ci < chunks_.size(); ++ci) {
      auto& c = chunks_[ci];
      for (size_t pi : c.params) {
        auto& gp = params_[pi];
        if (gp.slice >= 0)
          shards_.slices()[gp.slice].grad = c.grad_shard.narrow(0, gp.slice_offset, shards_.slices()[gp.slice].master.numel());
      }
    }
    shards_.prepare_grads();
  }

  c10::ScalarType compute_dtype() const override { return compute_dtype_; }
  double loss_scale() const override { return shards_.loss_scale(); }

  void zero_grad(torch::optim::Optimizer&) override {
    torch::NoGradGuard no_grad;
    for (auto& c : chunks_) c.grad_shard.zero_();
    for (auto& gp : params_) gp.param.mutable_grad() = torch::Tensor();
    for (auto& s : shards_.slices()) s.master.mutable_grad() = torch::Tensor();
  }

  double clip_grad_norm(torch::optim::Optimizer&, double max_norm, double norm_type) override {
    return shards_.clip_grad_norm(max_norm, norm_type);
  }

  bool optimizer_step(torch::optim::Optimizer& optimizer) override {
    bool ran = shards_.step(optimizer);
    torch::NoGradGuard no_grad;
    if (ran && nvme_) stream_optimizer_step(optimizer);
    for (auto& c : chunks_) {
      if (c.gathering) {  // a prefetch still in flight: finish it, then it is released below
        c.gather_handle.wait();
        c.gathering = false;
        c.gathered = true;
        for (size_t pi : c.params) set_state(params_[pi], TensorState::kHold);
      }
      c.staging = torch::Tensor();
      if (ran && !c.nvme_optim && !c.master.is_same(c.shard)) c.shard.copy_(c.master);
      if (!c.gathered) continue;
      if (c.pinned) {
        dist::all_gather(c.data, gather_source(c), group_);  // refresh the kept copy
        c.staging = torch::Tensor();
        for (size_t pi : c.params)
          if (params_[pi].state != TensorState::kHold) set_state(params_[pi], TensorState::kHold);
      }
    }
    release_unpinned();  // gathered copies are stale now
    reset_usage();
    return ran;
  }

  // ---- checkpoints ----------------------------------------------------------------------
  checkpoint::NamedTensors full_model_state(const torch::nn::Module& model) const override {
    torch::NoGradGuard no_grad;
    auto state = ModelWrapper::full_model_state(model);
    std::map<std::string, size_t> pos;
    for (size_t i = 0; i < state.size(); ++i) pos[state[i].first] = i;
    gathered_.assign(chunks_.size(), torch::Tensor());
    for (size_t ci = 0; ci < chunks_.size(); ++ci) {
      const auto& c = chunks_[ci];
      auto full = torch::empty({c.elements}, torch::kFloat32);
      torch::Tensor mine;
      if (c.nvme_optim) {
        mine = torch::empty({c.shard_elements}, torch::kFloat32);
        nvme_->read(mine, c.off_master);
      } else {
        mine = c.master.scalar_type() == torch::kFloat32 ? c.master : c.master.to(torch::kFloat32);
      }
      dist::all_gather(full, mine.contiguous(), group_);
      gathered_[ci] = full;
      for (size_t pi : c.params) {
        const auto& gp = params_[pi];
        auto it = pos.find(gp.name);
        if (it != pos.end()) state[it->second].second = full.narrow(0, gp.offset, gp.numel).view(gp.shape);
      }
    }
    return state;
  }

  void after_model_load() override {
    torch::NoGradGuard no_grad;
    for (size_t ci = 0; ci < gathered_.size() && ci < chunks_.size(); ++ci) {
      auto& c = chunks_[ci];
      const auto& full = gathered_[ci];
      if (!full.defined()) continue;
      auto piece = full.narrow(0, rank_ * c.shard_elements, c.shard_elements).contiguous();
      if (c.nvme_optim) nvme_->write(piece, c.off_master);
      else c.master.copy_(piece);
      if (c.nvme_param) nvme_->write(piece.to(compute_dtype_), c.off_shard);
      else if (c.nvme_optim || !c.master.is_same(c.shard)) c.shard.copy_(piece);
      if (c.gathered) c.data.copy_(full);
    }
    gathered_.clear();
  }

  std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module&) const override {
    return shards_.checkpoint_slices();
  }
  bool optimizer_sharded() const override { return ranks_ > 1; }

  checkpoint::NamedTensors external_optimizer_state(std::map<std::string, std::string>* metadata) const override {
    checkpoint::NamedTensors out;
    if (!nvme_) return out;
    for (size_t ci = 0; ci < chunks_.size(); ++ci) {
      const auto& c = chunks_[ci];
      if (!c.nvme_optim || c.optim_step == 0) continue;
      auto m = torch::empty({c.shard_elements}, torch::kFloat32), v = torch::empty_like(m);
      nvme_->read(m, c.off_m);
      nvme_->read(v, c.off_v);
      for (const StreamedSlice* s : streamed_of_chunk(ci)) {
        const auto& name = params_[s->param].name;
        out.emplace_back(name + ".exp_avg", m.narrow(0, s->shard_offset, s->len).clone());
        out.emplace_back(name + ".exp_avg_sq", v.narrow(0, s->shard_offset, s->len).clone());
        out.emplace_back(name + ".step", torch::tensor({c.optim_step}, torch::kInt64));
        if (metadata) (*metadata)["offset." + name] = std::to_string(s->param_offset);
      }
    }
    return out;
  }

  void load_external_optimizer_state(const checkpoint::OptimizerStateSource& source) override {
    if (!nvme_) return;
    for (size_t ci = 0; ci < chunks_.size(); ++ci) {
      auto& c = chunks_[ci];
      if (!c.nvme_optim) continue;
      auto m = torch::zeros({c.shard_elements}, torch::kFloat32), v = torch::zeros_like(m);
      int64_t step = 0;
      for (const StreamedSlice* s : streamed_of_chunk(ci)) {
        const auto& name = params_[s->param].name;
        if (!source.contains(name + ".exp_avg")) continue;
        COLOSSAL_CHECK(source.saved_numel(name + ".exp_avg") == params_[s->param].numel,
                       "[checkpoint] optimizer state '", name, ".exp_avg' was saved for ",
                       source.saved_numel(name + ".exp_avg"), " elements; the parameter has ",
                       params_[s->param].numel);
        m.narrow(0, s->shard_offset, s->len).copy_(source.read_range(name + ".exp_avg", s->param_offset, s->len));
        v.narrow(0, s->shard_offset, s->len).copy_(source.read_range(name + ".exp_avg_sq", s->param_offset, s->len));
        step = std::max(step, source.read_scalar(name + ".step").item<int64_t>());
      }
      nvme_->write(m, c.off_m);
      nvme_->write(v, c.off_v);
      c.optim_step = step;
    }
  }

  booster::MemoryReport memory_report(const torch::nn::Module& model,
                                      const torch::optim::Optimizer& optimizer) const override {
    booster::MemoryReport r;
    int64_t elem = c10::elementSize(compute_dtype_);
    for (const auto& c : chunks_) {
      int64_t shard_bytes = c.shard_elements * elem, master_bytes = c.shard_elements * 4;
      r.add("parameters", c.nvme_param ? "nvme" : "host", shard_bytes);
      r.add("gradients", "host", c.grad_shard.numel() * static_cast<int64_t>(c.grad_shard.element_size()));
      if (c.nvme_optim) {
        r.add("master weights", "nvme", master_bytes);
        r.add("optimizer state", "nvme", 2 * master_bytes);
      } else if (!c.master.is_same(c.shard)) {
        r.add("master weights", "host", master_bytes);
      }
    }
    r.add("gathered chunks", "host", gathered_bytes_);
    auto generic = ModelWrapper::memory_report(model, optimizer);
    for (const auto& [tier, n] : generic.bytes["optimizer state"]) r.add("optimizer state", tier, n);
    r.counters["chunks"] = static_cast<double>(chunks_.size());
    r.counters["chunk_elements"] = static_cast<double>(chunk_elements_);
    r.counters["gathers"] = static_cast<double>(gathers_);
    r.counters["prefetches"] = static_cast<double>(prefetches_);
    r.counters["evictions"] = static_cast<double>(evictions_);
    r.counters["peak_gathered_bytes"] = static_cast<double>(peak_gathered_bytes_);
    if (nvme_) {
      r.counters["nvme_bytes_read"] = static_cast<double>(nvme_->bytes_read());
      r.counters["nvme_bytes_written"] = static_cast<double>(nvme_->bytes_written());
    }
    return r;
  }

  std::map<std::string, double> extra_state() const override { return shards_.scaler_state(); }
  void load_extra_state(const std::map<std::string, double>& state) override { shards_.load_scaler_state(state); }

 private:
  void set_state(GParam& gp, TensorState to) {
    check_transition(gp.name, gp.state, to);
    gp.state = to;
  }

  // ---- setup ----------------------------------------------------------------------------
  void collect_parameters(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
    std::set<const void*> in_optimizer;
    std::map<const void*, size_t> group_of;
    for (size_t gi = 0; gi < optimizer.param_groups().size(); ++gi)
      for (const auto& p : optimizer.param_groups()[gi].params()) {
        in_optimizer.insert(p.unsafeGetTensorImpl());
        group_of[p.unsafeGetTensorImpl()] = gi;
      }
    for (const auto& item : model.named_parameters(/*recurse=*/true)) {
      if (!item.value().requires_grad()) continue;
      COLOSSAL_CHECK(item.value().scalar_type() == c10::kFloat, "[gemini] parameter '", item.key(),
                     "' is ", item.value().scalar_type(), "; boost an fp32 model (precision is an option)");
      GParam gp;
      gp.param = item.value();
      gp.name = item.key();
      gp.shape = item.value().sizes().vec();
      gp.numel = item.value().numel();
      auto g = group_of.find(item.value().unsafeGetTensorImpl());
      if (g != group_of.end()) gp.group = g->second;
      index_of_name_[gp.name] = params_.size();
      params_.push_back(std::move(gp));
      in_optimizer.erase(item.value().unsafeGetTensorImpl());
    }
    COLOSSAL_CHECK(in_optimizer.empty(), "[gemini] the optimizer holds ", in_optimizer.size(),
                   " tensor(s) that are not trainable parameters of the model being boosted");
    COLOSSAL_CHECK(!params_.empty(), "[gemini] the model has no trainable parameters");
  }

  void build_chunks(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
    torch::NoGradGuard no_grad;
    // The search packs the parameters that get sharded chunks (all of them if none is large).
    std::vector<int64_t> sizes;
    for (const auto& gp : params_)
      if (gp.numel >= options_.keep_gathered_below) sizes.push_back(gp.numel);
    if (sizes.empty())
      for (const auto& gp : params_) sizes.push_back(gp.numel);
    int64_t E = options_.chunk_elements;
    if (E <= 0) {
      auto search = options_.chunk_search;
      search.ranks = ranks_;
      E = search_chunk_size(sizes, search).chunk_elements;
    } else {
      E = (E + ranks_ - 1) / ranks_ * ranks_;
    }
    chunk_elements_ = E;
    // Pack in registration order (what forward usually follows); parameters smaller than
    // keep_gathered_below go last, into chunks that stay gathered (not worth a collective each).
    std::vector<size_t> large, small;
    for (size_t i = 0; i < params_.size(); ++i)
      (params_[i].numel < options_.keep_gathered_below ? small : large).push_back(i);
    auto pack = [&](const std::vector<size_t>& ids, int64_t capacity) {
      int64_t used = capacity;
      for (size_t i : ids) {
        COLOSSAL_CHECK(params_[i].numel <= capacity, "[gemini] parameter '", params_[i].name, "' (",
                       params_[i].numel, " elements) does not fit chunk_elements = ", capacity);
        if (used + params_[i].numel > capacity) {
          chunks_.emplace_back();
          chunks_.back().elements = capacity;
          used = 0;
        }
        params_[i].chunk = chunks_.size() - 1;
        params_[i].offset = used;
        chunks_.back().params.push_back(i);
        used += params_[i].numel;
      }
    };
    pack(large, E);
    int64_t large_chunks = static_cast<int64_t>(chunks_.size());
    int64_t small_total = 0;
    for (size_t i : small) small_total += params_[i].numel;
    // Sized to what they hold (a full-size chunk of biases would be mostly padding).
    pack(small, std::min(E, (small_total + ranks_ - 1) / ranks_ * ranks_));
    int64_t n = static_cast<int64_t>(chunks_.size());
    // Chunks beyond shard_param_frac of the large ones, and every small one, stay gathered.
    int64_t sharded = static_cast<int64_t>(std::ceil(options_.shard_param_frac * large_chunks - 1e-9));
    int64_t optim_off = static_cast<int64_t>(std::ceil(options_.offload_optim_frac * n - 1e-9));
    int64_t param_off = static_cast<int64_t>(std::ceil(options_.offload_param_frac * n - 1e-9));
    bool nvme = options_.offload_device == "nvme";
    int64_t nvme_bytes = 0, S = E / ranks_;  // the largest shard
    int64_t elem = c10::elementSize(compute_dtype_);
    for (int64_t ci = 0; ci < n; ++ci) {
      chunks_[ci].nvme_optim = nvme && ci < optim_off;
      chunks_[ci].nvme_param = nvme && ci < param_off;
      int64_t shard = chunks_[ci].elements / ranks_;
      if (chunks_[ci].nvme_optim) nvme_bytes += 3 * (shard * 4 + 4096);
      if (chunks_[ci].nvme_param) nvme_bytes += shard * elem + 4096;
    }
    if (nvme_bytes > 0) {
      check_streamable(optimizer);
      nvme_ = std::make_unique<offload::NvmeStore>(options_.nvme_dir, nvme_bytes, "rank" + std::to_string(rank_));
    }
    torch::Tensor zeros;  // written as the initial moments
    for (int64_t ci = 0; ci < n; ++ci) {
      auto& c = chunks_[ci];
      c.shard_elements = c.elements / ranks_;
      c.pinned = ci >= sharded;
      c.data = torch::zeros({c.elements}, torch::TensorOptions().dtype(compute_dtype_));
      for (size_t pi : c.params) {
        auto& gp = params_[pi];
        c.data.narrow(0, gp.offset, gp.numel).copy_(gp.param.detach().reshape({-1}));
        gp.param.set_data(c.data.narrow(0, gp.offset, gp.numel).view(gp.shape));
      }
      c.shard = c.data.narrow(0, rank_ * c.shard_elements, c.shard_elements).clone();
      bool separate_master = compute_dtype_ != c10::kFloat || ci < optim_off;
      c.master = separate_master ? c.shard.to(torch::kFloat32, false, /*copy=*/true) : c.shard;
      c.grad_shard = torch::zeros({c.shard_elements}, c.data.options());
      if (c.nvme_optim) {
        if (!zeros.defined()) zeros = torch::zeros({S}, torch::kFloat32);
        auto z = zeros.narrow(0, 0, c.shard_elements);
        c.off_master = nvme_->allocate(c.shard_elements * 4);
        c.off_m = nvme_->allocate(c.shard_elements * 4);
        c.off_v = nvme_->allocate(c.shard_elements * 4);
        nvme_->write(c.master, c.off_master);
        nvme_->write(z, c.off_m);
        nvme_->write(z, c.off_v);
        c.master = torch::Tensor();
        shards_.streamed_grads().push_back(c.grad_shard);
      }
      if (c.nvme_param) {
        c.off_shard = nvme_->allocate(c.shard_elements * elem);
        nvme_->write(c.shard, c.off_shard);
        c.shard = torch::Tensor();
      }
      gathered_bytes_ += c.bytes();
      // The optimizer's view: each parameter's intersection with this rank's shard.
      int64_t lo = rank_ * c.shard_elements, hi = lo + c.shard_elements;
      c.streamed_begin = streamed_.size();
      for (size_t pi : c.params) {
        auto& gp = params_[pi];
        int64_t a = std::max(lo, gp.offset), b = std::min(hi, gp.offset + gp.numel);
        if (a >= b) continue;
        if (c.nvme_optim) {
          streamed_.push_back({pi, static_cast<size_t>(ci), a - gp.offset, a - lo, b - a});
          continue;
        }
        MasterSlice s;
        s.name = gp.name;
        s.shape = gp.shape;
        s.offset = a - gp.offset;
        s.master = c.master.narrow(0, a - lo, b - a);
        gp.slice = static_cast<int64_t>(shards_.slices().size());
        gp.slice_offset = a - lo;
        slice_of_[gp.param.unsafeGetTensorImpl()] = gp.slice;
        shards_.slices().push_back(std::move(s));
      }
      c.streamed_end = streamed_.size();
    }
    for (auto& b : model.buffers())
      if (b.is_floating_point() && compute_dtype_ != c10::kFloat) b.set_data(b.detach().to(compute_dtype_));
  }

  // Hooks on every module that directly owns managed parameters.
  void install_module_hooks(torch::nn::Module& module, const std::string& prefix) {
    std::vector<size_t> own;
    for (const auto& item : module.named_parameters(/*recurse=*/false)) {
      auto it = index_of_name_.find(prefix + item.key());
      if (it != index_of_name_.end()) own.push_back(it->second);
    }
    if (!own.empty()) {
      auto unit = std::make_shared<HookedModule>();
      unit->params = own;
      for (size_t pi : own)
        if (std::find(unit->chunks.begin(), unit->chunks.end(), params_[pi].chunk) == unit->chunks.end())
          unit->chunks.push_back(params_[pi].chunk);
      nn::ForwardHooks hooks;
      hooks.pre = [this, unit] { access(*unit); };
      hooks.post = [this, unit](const std::vector<torch::Tensor>& outputs) { post_forward(unit, outputs); };
      hook_ids_.push_back(nn::set_forward_hooks(module, std::move(hooks)));
    }
    for (const auto& child : module.named_children())
      install_module_hooks(*child.value(), prefix + child.key() + ".");
  }

  void install_gradient_hooks() {
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    for (const auto& gp : params_) {
      params.push_back(gp.param);
      names.push_back(gp.name);
    }
    accumulators_ = booster::add_gradient_ready_hooks(params, names, "gemini", [this](size_t i) {
      if (in_backward_) gradient_ready(i);
    });
  }

  void reset_usage() {
    for (auto& gp : params_) gp.used = false;
    for (auto& c : chunks_) c.used = 0;
  }

  // ---- NVMe ------------------------------------------------------------------------------
  // The NVMe-streamed slices of chunk `ci` (streamed_ is built in chunk order).
  std::vector<const StreamedSlice*> streamed_of_chunk(size_t ci) const {
    std::vector<const StreamedSlice*> out;
    for (size_t k = chunks_[ci].streamed_begin; k < chunks_[ci].streamed_end; ++k) out.push_back(&streamed_[k]);
    return out;
  }

  void check_streamable(const torch::optim::Optimizer& optimizer) const {
    for (const auto& g : optimizer.param_groups()) {
      auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&g.options());
      COLOSSAL_CHECK(o != nullptr, "[gemini] NVMe optimizer offload streams an AdamW step; boost "
                     "torch::optim::AdamW or colossal FusedAdamW (got another optimizer)");
      COLOSSAL_CHECK(!o->amsgrad(), "[gemini] NVMe optimizer offload does not support amsgrad");
    }
  }

  // The shard to all-gather from: in memory, or read from NVMe into a staging buffer.
  torch::Tensor gather_source(Chunk& c) {
    if (!c.nvme_param) return c.shard;
    c.staging = torch::empty({c.shard_elements}, torch::TensorOptions().dtype(compute_dtype_));
    nvme_->read(c.staging, c.off_shard);
    return c.staging;
  }

  // AdamW over the NVMe-resident chunks, one chunk at a time: the next chunk's master and
  // moments are read while this one is updated, and updated chunks are written back behind.
  void stream_optimizer_step(torch::optim::Optimizer& optimizer) {
    struct Buffers {
      size_t chunk = 0;
      torch::Tensor master, m, v, shard;
      std::vector<uint64_t> tickets;
    };
    std::vector<size_t> order;
    for (size_t ci = 0; ci < chunks_.size(); ++ci)
      if (chunks_[ci].nvme_optim) order.push_back(ci);
    auto start_read = [&](size_t ci) {
      Buffers b;
      b.chunk = ci;
      auto& c = chunks_[ci];
      for (auto* t : {&b.master, &b.m, &b.v}) *t = torch::empty({c.shard_elements}, torch::kFloat32);
      b.tickets = {nvme_->read_async(b.master, c.off_master), nvme_->read_async(b.m, c.off_m),
                   nvme_->read_async(b.v, c.off_v)};
      return b;
    };
    double multiplier = shards_.streamed_grad_multiplier();
    std::deque<Buffers> writing;
    Buffers next;
    if (!order.empty()) next = start_read(order[0]);
    for (size_t k = 0; k < order.size(); ++k) {
      Buffers b = std::move(next);
      if (k + 1 < order.size()) next = start_read(order[k + 1]);  // read-ahead
      for (auto t : b.tickets) nvme_->wait(t);
      auto& c = chunks_[b.chunk];
      ++c.optim_step;
      for (const StreamedSlice* s : streamed_of_chunk(b.chunk)) {
        auto g = c.grad_shard.narrow(0, s->shard_offset, s->len).to(torch::kFloat32, false, /*copy=*/true);
        if (multiplier != 1.0) g.mul_(multiplier);
        auto pm = b.master.narrow(0, s->shard_offset, s->len);
        auto m = b.m.narrow(0, s->shard_offset, s->len);
        auto v = b.v.narrow(0, s->shard_offset, s->len);
        const auto& opts = static_cast<const torch::optim::AdamWOptions&>(
            optimizer.param_groups()[params_[s->param].group].options());
        optim::fused_adamw_update(pm, m, v, g, torch::Tensor(), opts, c.optim_step);
      }
      b.tickets = {nvme_->write_async(b.master, c.off_master), nvme_->write_async(b.m, c.off_m),
                   nvme_->write_async(b.v, c.off_v)};  // write-behind
      if (c.nvme_param) {
        b.shard = compute_dtype_ == c10::kFloat ? b.master : b.master.to(compute_dtype_);
        b.tickets.push_back(nvme_->write_async(b.shard, c.off_shard));
      } else {
        c.shard.copy_(b.master);
      }
      writing.push_back(std::move(b));
      while (writing.size() > 2) {
        for (auto t : writing.front().tickets) nvme_->wait(t);
        writing.pop_front();
      }
    }
    for (auto& w : writing)
      for (auto t : w.tickets) nvme_->wait(t);
  }

  // ---- gather / release -----------------------------------------------------------------
  void access(const HookedModule& unit) {
    for (size_t ci : unit.chunks) {
      note_access(ci);
      ensure_gathered(ci);
    }
    for (size_t pi : unit.params) {
      auto& gp = params_[pi];
      if (gp.state == TensorState::kHoldAfterBwd) set_state(gp, TensorState::kHold);
      set_state(gp, TensorState::kCompute);
    }
    prefetch();
  }

  void post_forward(const std::shared_ptr<HookedModule>& unit, const std::vector<torch::Tensor>& outputs) {
    for (size_t pi : unit->params) {
      auto& gp = params_[pi];
      set_state(gp, TensorState::kHold);
      if (!gp.used) {
        gp.used = true;
        ++chunks_[gp.chunk].used;
      }
    }
    if (!first_step_ && !auto_placement_) {
      // Released once every parameter in it has run (a chunk usually spans several modules),
      // unless the recorded order says it is needed again right away.
      for (size_t ci : unit->chunks) {
        auto& c = chunks_[ci];
        bool all_used = c.used == static_cast<int64_t>(c.params.size());
        if (!c.pinned && all_used && !next_access_is(ci) && releasable(ci)) release(ci);
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

  void ensure_gathered(size_t ci) {
    auto& c = chunks_[ci];
    c.last_use = ++clock_;
    if (c.gathered) return;
    if (c.gathering) {
      c.gather_handle.wait();
      c.gathering = false;
    } else {
      make_room(ci, c.bytes());
      alloc_storage(c.data, c.bytes());
      dist::all_gather(c.data, gather_source(c), group_);
      gathered_bytes_ += c.bytes();
      ++gathers_;
    }
    c.staging = torch::Tensor();
    peak_gathered_bytes_ = std::max(peak_gathered_bytes_, gathered_bytes_);
    c.gathered = true;
    for (size_t pi : c.params) set_state(params_[pi], TensorState::kHold);
  }

  bool releasable(size_t ci) const {
    const auto& c = chunks_[ci];
    if (!c.gathered || c.gathering) return false;
    for (size_t pi : c.params) {
      auto s = params_[pi].state;
      if (s == TensorState::kCompute || s == TensorState::kReadyForReduce) return false;
    }
    return true;
  }

  void release(size_t ci) {
    auto& c = chunks_[ci];
    for (size_t pi : c.params)
      if (params_[pi].state != TensorState::kFree) set_state(params_[pi], TensorState::kFree);
    free_storage(c.data);
    c.gathered = false;
    gathered_bytes_ -= c.bytes();
  }

  void release_unpinned() {
    for (size_t ci = 0; ci < chunks_.size(); ++ci)
      if (!chunks_[ci].pinned && releasable(ci)) release(ci);
  }

  // auto placement: release cached chunks, furthest next use first, until `bytes` fit.
  void make_room(size_t wanted, int64_t bytes) {
    if (!auto_placement_) return;
    while (gathered_bytes_ + bytes > options_.gathered_budget_bytes) {
      int64_t best = -1, best_score = -1;
      for (size_t ci = 0; ci < chunks_.size(); ++ci) {
        if (ci == wanted || chunks_[ci].pinned || !releasable(ci)) continue;
        int64_t score = next_use_distance(ci);
        if (score == LLONG_MAX) score = LLONG_MAX - chunks_[ci].last_use;  // unknown: LRU
        if (score > best_score) {
          best_score = score;
          best = static_cast<int64_t>(ci);
        }
      }
      if (best < 0) return;  // everything gathered is in use: go over budget
      release(static_cast<size_t>(best));
      ++evictions_;
    }
  }

  // ---- the recorded access order ------------------------------------------------------
  // order_ holds one entry per (module call, chunk) of the first step, forward and backward;
  // cursor_ is one past the entry matched last (resynchronised by search when a step deviates).
  void note_access(size_t ci) {
    if (recording_) {
      order_.push_back(ci);
      return;
    }
    for (size_t k = cursor_; k < order_.size(); ++k)
      if (order_[k] == ci) {
        cursor_ = k + 1;
        return;
      }
    for (size_t k = 0; k < cursor_ && k < order_.size(); ++k)
      if (order_[k] == ci) {
        cursor_ = k + 1;
        return;
      }
  }

  bool next_access_is(size_t ci) const {
    return !recording_ && cursor_ < order_.size() && order_[cursor_] == ci;
  }

  int64_t next_use_distance(size_t ci) const {
    if (recording_) return LLONG_MAX;
    for (size_t k = cursor_; k < order_.size(); ++k)
      if (order_[k] == ci) return static_cast<int64_t>(k - cursor_ + 1);
    return LLONG_MAX;
  }

  // Starts gathering the next chunks of the recorded order. Every rank follows the same order,
  // so the collectives match.
  void prefetch() {
    if (recording_ || first_step_ || options_.prefetch <= 0) return;
    // Look at the next `prefetch` distinct chunks (whether gathered already or not).
    std::vector<size_t> seen;
    for (size_t k = cursor_; k < order_.size(); ++k) {
      size_t ci = order_[k];
      if (std::find(seen.begin(), seen.end(), ci) != seen.end()) continue;
      seen.push_back(ci);
      if (static_cast<int>(seen.size()) > options_.prefetch) break;
      auto& c = chunks_[ci];
      if (c.gathered || c.gathering) continue;
      if (auto_placement_ && gathered_bytes_ + c.bytes() > options_.gathered_budget_bytes) break;
      alloc_storage(c.data, c.bytes());
      c.gather_handle = dist::all_gather_async(c.data, gather_source(c), group_);
      c.gathering = true;
      ++prefetches_;
      gathered_bytes_ += c.bytes();
    }
  }

  // ---- gradients ------------------------------------------------------------------------
  void gradient_ready(size_t i) {
    auto& gp = params_[i];
    auto& c = chunks_[gp.chunk];
    if (first_step_ && gp.state == TensorState::kHold) used_outside_call_.push_back(gp.name);
    set_state(gp, TensorState::kReadyForReduce);
    torch::NoGradGuard no_grad;
    if (!c.grad.defined()) c.grad = torch::zeros({c.elements}, c.data.options());
    const auto& g = gp.param.grad();
    if (g.defined()) {
      c.grad.narrow(0, gp.offset, gp.numel).copy_(g.reshape({-1}));
      gp.param.mutable_grad() = torch::Tensor();
    }
    if (++c.ready == static_cast<int64_t>(c.params.size())) reduce_chunk(gp.chunk);
  }

  void reduce_chunk(size_t ci) {
    auto& c = chunks_[ci];
    if (!c.grad.defined()) c.grad = torch::zeros({c.elements}, c.data.options());
    c.reduce_out = torch::empty({c.shard_elements}, c.grad.options());
    c.reduce_handle = dist::reduce_scatter_async(c.reduce_out, c.grad, group_, dist::ReduceOp::kAvg);
    reducing_.push_back(ci);
    for (size_t pi : c.params)
      if (params_[pi].state == TensorState::kReadyForReduce) set_state(params_[pi], TensorState::kHoldAfterBwd);
    if (!first_step_ && !auto_placement_ && !c.pinned && releasable(ci)) release(ci);
    while (reducing_.size() > 2) drain_oldest();
  }

  void drain_oldest() {
    size_t ci = reducing_.front();
    reducing_.pop_front();
    auto& c = chunks_[ci];
    c.reduce_handle.wait();
    torch::NoGradGuard no_grad;
    c.grad_shard.add_(c.reduce_out);
    c.grad = torch::Tensor();
    c.reduce_out = torch::Tensor();
  }

  GeminiPlugin::Options options_;
  dist::Group group_;
  int ranks_, rank_;
  MasterShards shards_;
  c10::ScalarType compute_dtype_ = c10::kFloat;
  bool auto_placement_ = false;
  int64_t chunk_elements_ = 0;
  std::vector<GParam> params_;
  std::map<std::string, size_t> index_of_name_;
  std::map<const void*, int64_t> slice_of_;
  std::vector<Chunk> chunks_;
  std::vector<int64_t> hook_ids_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::deque<size_t> reducing_;
  std::vector<size_t> order_;  // chunk accesses of the first step (see note_access)
  size_t cursor_ = 0;
  bool recording_ = true;
  bool first_step_ = true;
  bool in_backward_ = false;
  std::vector<std::string> used_outside_call_;
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0, clock_ = 0, evictions_ = 0;
  int64_t gathers_ = 0, prefetches_ = 0;
  std::unique_ptr<offload::NvmeStore> nvme_;
  std::vector<StreamedSlice> streamed_;
  mutable std::vector<torch::Tensor> gathered_;  // full_model_state -> after_model_load
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
  COLOSSAL_CHECK(gathered_budget_bytes > 0, "[gemini] gathered_budget_bytes: expected > 0");
  COLOSSAL_CHECK(prefetch >= 0, "[gemini] prefetch: expected >= 0, got ", prefetch);
  COLOSSAL_CHECK(keep_gathered_below >= 0, "[gemini] keep_gathered_below: expected >= 0, got ",
                 keep_gathered_below);
  loss_scaler.validate();
}

void GeminiPlugin::Options::read(const ConfigNode& c) {
  c.read("precision", precision);
  c.read("placement", placement);
  c.read("shard_param_frac", shard_param_frac);
  c.read("offload_optim_frac", offload_optim_frac);
  c.read("offload_param_frac", offload_param_frac);
  c.read("offload_device", offload_device);
  c.read("nvme_dir", nvme_dir);
  c.read("gathered_budget_bytes", gathered_budget_bytes);
  c.read("prefetch", prefetch);
  c.read("chunk_elements", chunk_elements);
  c.read("check_first_step", check_first_step);
  c.read("keep_gathered_below", keep_gathered_below);
  loss_scaler.read(c.child("loss_scaler"));
}

GeminiPlugin::GeminiPlugin(Options options) : options_(std::move(options)) { options_.validate(); }

std::pair<int, int> GeminiPlugin::data_parallel_rank_and_size() const {
  COLOSSAL_CHECK(dist::is_initialized(), "[gemini] call colossal::dist::init() first");
  return {dist::rank(), dist::world_size()};
}

std::unique_ptr<booster::ModelWrapper> GeminiPlugin::wrap_model(torch::nn::Module& model,
                                                               torch::optim::Optimizer& optimizer) {
  COLOSSAL_CHECK(dist::is_initialized(), "[gemini] call colossal::dist::init() before boosting");
  return std::make_unique<GeminiModel>(model, optimizer, options_);
}

}  // namespace colossal::zero
