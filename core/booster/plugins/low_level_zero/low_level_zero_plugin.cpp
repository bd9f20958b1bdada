#include "core/booster/plugins/low_level_zero/low_level_zero_plugin.h"

#include <torch/torch.h>

#include <deque>
#include <set>

#include "core/amp/precision.h"
#include "core/booster/full_gradients.h"
#include "core/parallel/data/model_sync.h"
#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/zero/master_shards.h"
#include "core/zero/shard_math.h"

namespace colossal::booster {
using namespace colossal::zero;  // the ZeRO mechanism this plugin drives
namespace {


struct ZeroParam {
  torch::Tensor param;    // the model's parameter: a view of the first `numel` elements of flat
  std::string name;
  int64_t numel = 0;
  int64_t shard = 0;      // elements per rank (padded)
  torch::Tensor flat;     // padded working storage, shard * N elements
  int64_t slice = -1;     // index into MasterShards::slices(), -1 when this rank owns nothing
  torch::Tensor grad_shard;  // this rank's reduced gradient, `shard` elements
  size_t bucket = 0;
  int64_t bucket_offset = 0;  // stage 1: in the bucket's flat; stage 2: in each rank's segment
  bool master_is_view = false;
  bool expert = false;  // expert parallelism: sharded over the expert data-parallel group
};

struct ShardBucket {
  std::vector<size_t> params;  // indices into ZeroModel::params_ (all dense or all expert)
  bool expert = false;
  int64_t elements = 0;        // stage 1: padded elements; stage 2: per-rank segment length
  torch::Tensor flat;          // stage 1: gradients (views handed out as .grad())
  torch::Tensor send;          // stage 2: rank-major gradients (from the pool while in use)
  torch::Tensor recv;          // the reduced result (stage 2, or stage 1 in another dtype)
  size_t pending = 0;
  dist::Handle handle;
};

class ZeroModel : public booster::StepHooks, public booster::StateStore {
 public:
  ZeroModel(torch::nn::Module& model, torch::optim::Optimizer& optimizer, const c10::Device& device,
            const LowLevelZeroPlugin::Options& options)
      : StepHooks("zero" + std::to_string(options.stage)),
        options_(options),
        group_(options.scope.resolved_group()),
        ranks_(group_.size()),
        rank_(group_.rank()),
        shards_(group_, amp::parse_precision(options.precision) == amp::Precision::kFp16
                            ? std::optional<amp::DynamicLossScaler>(options.loss_scaler)
                            : std::nullopt) {
    auto precision = amp::parse_precision(options_.precision);
    compute_dtype_ = amp::compute_dtype(precision, device);
    device_ = device;
    comm_dtype_ = options_.communication_dtype.empty()
                      ? compute_dtype_
                      : amp::low_precision_dtype(amp::parse_precision(options_.communication_dtype));
    if (options_.scope.expert_group.is_member()) {
      expert_group_ = options_.scope.expert_group;
      expert_ranks_ = expert_group_.size();
      expert_rank_ = expert_group_.rank();
    }
    collect_parameters(model, optimizer);
    parallel::broadcast_model_state(model, group_, true, options_.scope.expert_parameters, expert_group_);
    shard_parameters(model);
    build_buckets();
    shards_.bind(optimizer, [this](const torch::Tensor& p) -> int64_t {
      auto it = index_of_.find(p.unsafeGetTensorImpl());
      return it == index_of_.end() ? -1 : params_[it->second].slice;
    });
    shards_.fuse_working_updates(optimizer);
    install_hooks();
  }

  // ---- backward -------------------------------------------------------------------------
  void before_backward() override {
    if (options_.stage == 1) reattach_gradients();
    for (auto& b : buckets_) b.pending = b.params.size();
    std::fill(ready_.begin(), ready_.end(), false);
    next_launch_ = 0;
    in_backward_ = true;
  }

  void after_backward() override {
    in_backward_ = false;
    if (!sync_) return;
    // Parameters that got no gradient contribute what they hold (zeros after zero_grad).
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) gradient_ready(i);
    while (!in_flight_.empty()) drain_oldest();
    for (auto& zp : params_)
      if (zp.slice >= 0) shards_.slices()[zp.slice].grad = zp.grad_shard.narrow(0, 0, slice_len(zp));
    shards_.prepare_grads();
  }

  void set_gradient_sync(bool enabled) override { sync_ = enabled; }
  bool gradient_sync() const override { return sync_; }
  c10::ScalarType compute_dtype() const override { return compute_dtype_; }
  double loss_scale() const override { return shards_.loss_scale(); }

  void zero_grad(torch::optim::Optimizer&) override {
    torch::NoGradGuard no_grad;
    if (options_.stage == 1) {
      reattach_gradients();
      for (auto& b : buckets_) b.flat.zero_();
    } else {
      for (auto& zp : params_) {
        zp.grad_shard.zero_();
        zp.param.mutable_grad() = torch::Tensor();
      }
    }
    for (auto& s : shards_.slices()) s.master.mutable_grad() = torch::Tensor();
  }

  double clip_grad_norm(torch::optim::Optimizer&, double max_norm, double norm_type) override {
    return shards_.clip_grad_norm(max_norm, norm_type, &options_.scope);
  }

  // ---- step -----------------------------------------------------------------------------
  bool optimizer_step(torch::optim::Optimizer& optimizer) override {
    if (!shards_.step(optimizer)) return false;
    torch::NoGradGuard no_grad;
    for (auto& zp : params_) {
      if (zp.slice >= 0 && !zp.master_is_view && !shards_.working_written(zp.slice))
        zp.flat.narrow(0, rank_of(zp) * zp.shard, slice_len(zp)).copy_(shards_.slices()[zp.slice].master);
    }
    gather_parameters();
    return true;
  }

  // ---- checkpoints ----------------------------------------------------------------------
  checkpoint::NamedTensors model_state(const torch::nn::Module& model, bool trainable_only) const override {
    if (masters_are_views_) return StateStore::model_state(model, trainable_only);
    // Separate fp32 masters: gather them into full tensors, which a load then writes into.
    torch::NoGradGuard no_grad;
    auto state = StateStore::model_state(model, trainable_only);
    std::map<const void*, size_t> pos;
    for (size_t i = 0; i < state.size(); ++i) pos[state[i].second.unsafeGetTensorImpl()] = i;
    gathered_.clear();
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& zp = params_[i];
      // On the working parameters' device (NCCL collectives need GPU memory); fp32.
      const auto opts = zp.param.options().dtype(torch::kFloat32);
      auto mine = torch::zeros({zp.shard}, opts);
      if (zp.slice >= 0) mine.narrow(0, 0, slice_len(zp)).copy_(shards_.slices()[zp.slice].master);
      auto all = torch::empty({zp.shard * ranks_of(zp)}, opts);
      dist::all_gather(all, mine, group_of(zp));
      auto full = all.narrow(0, 0, zp.numel).view(zp.param.sizes());
      gathered_.emplace_back(i, full);
      auto it = pos.find(zp.param.unsafeGetTensorImpl());
      if (it != pos.end()) state[it->second].second = full;
    }
    return state;
  }

  void after_load() override {
    torch::NoGradGuard no_grad;
    for (auto& [i, full] : gathered_) {
      auto& zp = params_[i];
      auto flat = full.reshape({-1});
      zp.flat.narrow(0, 0, zp.numel).copy_(flat);
      if (zp.slice >= 0)
        shards_.slices()[zp.slice].master.copy_(flat.narrow(0, rank_of(zp) * zp.shard, slice_len(zp)));
    }
    gathered_.clear();
  }

  std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module&) const override {
    return shards_.checkpoint_slices();
  }
  // Under expert parallelism dense pieces assemble over the data-parallel group and expert pieces
  // over the replicas holding the same experts (ep ranks hold other experts under the same shapes).
  checkpoint::NamedTensors gradients(const torch::nn::Module& model) const override {
    if (!expert_group_.is_member()) return StateStore::gradients(model);
    std::vector<checkpoint::OptimizerSlice> dense, experts;
    for (auto& s : optimizer_slices(model)) (options_.scope.is_expert(s.name) ? experts : dense).push_back(s);
    auto out = assemble_gradients(model, dense, &group_);
    for (auto& e : assemble_gradients(model, experts, &expert_group_)) out.push_back(std::move(e));
    return out;
  }
  const dist::Group* shard_group() const override { return &group_; }

  std::map<std::string, double> extra_state() const override { return shards_.scaler_state(); }
  void load_extra_state(const std::map<std::string, double>& state) override { shards_.load_scaler_state(state); }

 private:
  // Dense parameters are sharded over the data-parallel group; under expert parallelism expert
  // parameters over the replicas holding the same experts (each ep rank holds other experts).
  int ranks_of(bool expert) const { return expert ? expert_ranks_ : ranks_; }
  int ranks_of(const ZeroParam& zp) const { return ranks_of(zp.expert); }
  int rank_of(const ZeroParam& zp) const { return zp.expert ? expert_rank_ : rank_; }
  const dist::Group& group_of(const ZeroParam& zp) const { return zp.expert ? expert_group_ : group_; }

  int64_t slice_len(const ZeroParam& zp) const {
    return owned_length(zp.numel, zp.shard, rank_of(zp));
  }

  void collect_parameters(torch::nn::Module& model, torch::optim::Optimizer& optimizer) {
    std::set<const void*> in_optimizer;
    for (const auto& g : optimizer.param_groups())
      for (const auto& p : g.params()) in_optimizer.insert(p.unsafeGetTensorImpl());
    auto named = model.named_parameters(/*recurse=*/true);
    for (auto it = named.end(); it != named.begin();) {  // backward order, roughly
      --it;
      if (!it->value().requires_grad()) continue;
      COLOSSAL_CHECK(it->value().scalar_type() == c10::kFloat, "[zero] parameter '", it->key(),
                     "' is ", it->value().scalar_type(), "; boost an fp32 model (precision is an option)");
      ZeroParam zp;
      zp.param = it->value();
      zp.name = it->key();
      zp.expert = options_.scope.is_expert(zp.name);
      COLOSSAL_CHECK(!zp.expert || expert_group_.is_member(), "[zero] expert parameter '", zp.name,
                     "' without an expert data-parallel group");
      index_of_[zp.param.unsafeGetTensorImpl()] = params_.size();
      params_.push_back(std::move(zp));
      in_optimizer.erase(it->value().unsafeGetTensorImpl());
    }
    COLOSSAL_CHECK(in_optimizer.empty(), "[zero] the optimizer holds ", in_optimizer.size(),
                   " tensor(s) that are not trainable parameters of the model being boosted");
    COLOSSAL_CHECK(!params_.empty(), "[zero] the model has no trainable parameters");
    ready_.assign(params_.size(), false);
  }

  // Working parameters move into padded flat storage (in the compute dtype); masters are
  // views of it when that is possible, fp32 copies otherwise.
  void shard_parameters(torch::nn::Module& model) {
    torch::NoGradGuard no_grad;
    masters_are_views_ = compute_dtype_ == c10::kFloat && !options_.cpu_offload;
    for (auto& zp : params_) {
      zp.numel = zp.param.numel();
      zp.shard = shard_size(zp.numel, ranks_of(zp));
      zp.flat = torch::zeros({zp.shard * ranks_of(zp)}, zp.param.options().dtype(compute_dtype_)
                                                      .requires_grad(false));
      zp.flat.narrow(0, 0, zp.numel).copy_(zp.param.detach().reshape({-1}));
      auto sizes = zp.param.sizes().vec();
      zp.param.set_data(zp.flat.narrow(0, 0, zp.numel).view(sizes));
      if (options_.stage == 2) zp.grad_shard = torch::zeros({zp.shard}, zp.flat.options());
      int64_t len = slice_len(zp);
      if (len == 0) continue;
      MasterSlice s;
      s.name = zp.name;
      s.shape = sizes;
      s.offset = rank_of(zp) * zp.shard;
      auto piece = zp.flat.narrow(0, rank_of(zp) * zp.shard, len);
      zp.master_is_view = masters_are_views_;
      s.master = masters_are_views_ ? piece : piece.to(torch::kFloat32, false, /*copy=*/true);
      // bf16 on the CPU: FusedAdamW may rewrite this rank's part of the working copy itself.
      if (piece.scalar_type() == c10::kBFloat16 && piece.device().is_cpu() && s.master.device().is_cpu())
        s.working = piece;
      zp.slice = static_cast<int64_t>(shards_.slices().size());
      shards_.slices().push_back(std::move(s));
    }
    for (auto& b : model.buffers())
      if (b.is_floating_point() && compute_dtype_ != c10::kFloat) b.set_data(b.detach().to(compute_dtype_));
  }

  void build_buckets() {
    size_t i = 0;
    while (i < params_.size()) {
      ShardBucket b;
      // Dense and expert parameters never share a bucket (they reduce over different groups);
      // every rank holds as many experts of the same shapes, so the buckets line up.
      b.expert = params_[i].expert;
      while (i < params_.size() && params_[i].expert == b.expert &&
             (b.params.empty() || b.elements * per_element_(b.expert) < bucket_elements())) {
        auto& zp = params_[i];
        zp.bucket = buckets_.size();
        zp.bucket_offset = b.elements;
        b.elements += options_.stage == 1 ? zp.shard * ranks_of(zp) : zp.shard;
        b.params.push_back(i++);
      }
      if (options_.stage == 1) {
        b.flat = torch::zeros({b.elements}, params_[b.params.front()].flat.options());
        for (size_t pi : b.params) {
          auto& zp = params_[pi];
          zp.grad_shard = b.flat.narrow(0, zp.bucket_offset + rank_of(zp) * zp.shard, zp.shard);
        }
      }
      buckets_.push_back(std::move(b));
    }
    if (options_.stage == 1) reattach_gradients();
  }
  // Bucket sizes count all ranks' elements, so stage 2's per-rank segment is scaled.
  // Buckets are sized in fp32 elements (bucket_bytes / 4), whatever the working dtype.
  int64_t bucket_elements() const { return std::max<int64_t>(1, options_.bucket_bytes / 4); }
  int64_t per_element_(bool expert) const { return options_.stage == 1 ? 1 : ranks_of(expert); }

  torch::Tensor grad_view(const ZeroParam& zp) {
    return buckets_[zp.bucket].flat.narrow(0, zp.bucket_offset, zp.numel).view(zp.param.sizes());
  }

  // Stage 1: every .grad() is its bucket view (restored if someone reset or replaced it).
  void reattach_gradients() {
    torch::NoGradGuard no_grad;
    for (auto& zp : params_) {
      auto view = grad_view(zp);
      const auto& g = zp.param.grad();
      if (g.defined() && g.data_ptr() == view.data_ptr()) continue;
      if (g.defined()) view.copy_(g);
      else view.zero_();
      zp.param.mutable_grad() = view;
    }
  }

  void install_hooks() {
    std::vector<torch::Tensor> params;
    std::vector<std::string> names;
    for (const auto& zp : params_) {
      params.push_back(zp.param);
      names.push_back(zp.name);
    }
    accumulators_ = parallel::add_gradient_ready_hooks(params, names, "zero", [this](size_t i) {
      if (sync_ && in_backward_ && !ready_[i]) gradient_ready(i);
    });
  }

  void gradient_ready(size_t i) {
    ready_[i] = true;
    auto& zp = params_[i];
    ShardBucket& b = buckets_[zp.bucket];
    if (options_.stage == 2) {
      torch::NoGradGuard no_grad;
      if (!b.send.defined()) b.send = acquire_buffer(b.elements * ranks_of(b.expert));
      const auto& g = zp.param.grad();
      if (g.defined()) {
        auto flat = g.reshape({-1});
        for (int w = 0; w < ranks_of(zp); ++w) {
          int64_t len = owned_length(zp.numel, zp.shard, w);
          if (len > 0)
            b.send.narrow(0, w * b.elements + zp.bucket_offset, len)
                .copy_(flat.narrow(0, w * zp.shard, len));
        }
        zp.param.mutable_grad() = torch::Tensor();  // the full gradient is not kept
      }
    }
    if (--b.pending == 0) launch_ready_buckets();
  }

  // Buckets go out strictly in index order, so every rank issues the same collectives.
  void launch_ready_buckets() {
    while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) {
      size_t bi = next_launch_++;
      ShardBucket& b = buckets_[bi];
      if (options_.stage == 1) {
        if (comm_dtype_ == b.flat.scalar_type()) {
          b.handle = options_.scope.reduce_async(b.flat, b.expert);
        } else {
          b.recv = b.flat.to(comm_dtype_);
          b.handle = options_.scope.reduce_async(b.recv, b.expert);
        }
      } else {
        if (!b.send.defined()) b.send = acquire_buffer(b.elements * ranks_of(b.expert));
        b.recv = torch::empty({b.elements}, b.send.options());
        b.handle = options_.scope.reduce_scatter_async(b.recv, b.send, b.expert);
      }
      in_flight_.push_back(bi);
      // Bounded memory: at most two stage-2 buckets in flight.
      while (options_.stage == 2 && in_flight_.size() > 2) drain_oldest();
    }
  }

  void drain_oldest() {
    size_t bi = in_flight_.front();
    in_flight_.pop_front();
    ShardBucket& b = buckets_[bi];
    b.handle.wait();
    torch::NoGradGuard no_grad;
    if (options_.stage == 1) {
      if (b.recv.defined()) {
        b.flat.copy_(b.recv);
        b.recv = torch::Tensor();
      }
      return;
    }
    for (size_t pi : b.params) {
      auto& zp = params_[pi];
      zp.grad_shard.add_(b.recv.narrow(0, zp.bucket_offset, zp.shard));
    }
    release_buffer(std::move(b.send));
    b.send = torch::Tensor();
    b.recv = torch::Tensor();
  }

  torch::Tensor acquire_buffer(int64_t elements) {
    for (auto it = pool_.begin(); it != pool_.end(); ++it) {
      if (it->numel() == elements) {
        auto t = std::move(*it);
        pool_.erase(it);
        return t.zero_();
      }
    }
    return torch::zeros({elements}, torch::TensorOptions().dtype(comm_dtype_).device(device_));
  }
  void release_buffer(torch::Tensor t) {
    if (pool_.size() < 3) pool_.push_back(std::move(t));
  }

  // All-gathers the updated shards into every rank's working parameters, bucket by bucket
  // (registration order, two buckets in flight): dense parameters over the data-parallel group,
  // then expert parameters over theirs.
  void gather_parameters() {
    gather_parameters(false);
    if (expert_group_.is_member()) gather_parameters(true);
  }

  void gather_parameters(bool expert) {
    struct Gather {
      std::vector<size_t> params;
      int64_t elements = 0;
      torch::Tensor in, out;
      dist::Handle handle;
    };
    const int ranks = ranks_of(expert);
    // One rank holds every shard: its flats already are the whole parameters (the gather would
    // copy each one onto itself, through the transport).
    if (ranks == 1) return;
    const dist::Group& group = expert ? expert_group_ : group_;
    std::deque<Gather> flight;
    auto finish = [&](Gather& g) {
      g.handle.wait();
      int64_t off = 0;
      for (size_t pi : g.params) {
        auto& zp = params_[pi];
        for (int w = 0; w < ranks; ++w)
          zp.flat.narrow(0, w * zp.shard, zp.shard).copy_(g.out.narrow(0, w * g.elements + off, zp.shard));
        off += zp.shard;
      }
    };
    size_t i = 0;
    while (i < params_.size()) {
      Gather g;
      while (i < params_.size() && (g.params.empty() || g.elements * ranks < bucket_elements())) {
        if (params_[i].expert == expert) {
          g.elements += params_[i].shard;
          g.params.push_back(i);
        }
        ++i;
      }
      if (g.params.empty()) break;
      std::vector<torch::Tensor> mine;
      for (size_t pi : g.params)
        mine.push_back(params_[pi].flat.narrow(0, rank_of(params_[pi]) * params_[pi].shard, params_[pi].shard));
      g.in = torch::cat(mine);
      g.out = torch::empty({g.elements * ranks}, g.in.options());
      g.handle = dist::all_gather_async(g.out, g.in, group);
      flight.push_back(std::move(g));
      if (flight.size() > 2) {
        finish(flight.front());
        flight.pop_front();
      }
    }
    while (!flight.empty()) {
      finish(flight.front());
      flight.pop_front();
    }
  }

  LowLevelZeroPlugin::Options options_;
  dist::Group group_;
  int ranks_, rank_;
  dist::Group expert_group_;  // expert parallelism (unset otherwise)
  int expert_ranks_ = 1, expert_rank_ = 0;
  MasterShards shards_;
  c10::ScalarType compute_dtype_ = c10::kFloat, comm_dtype_ = c10::kFloat;
  c10::Device device_ = c10::kCPU;  // where buckets and buffers live (the plugin's device)
  bool masters_are_views_ = false;
  std::vector<ZeroParam> params_;
  std::map<const void*, size_t> index_of_;
  std::vector<ShardBucket> buckets_;
  std::vector<bool> ready_;
  std::deque<size_t> in_flight_;
  std::vector<torch::Tensor> pool_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  mutable std::vector<std::pair<size_t, torch::Tensor>> gathered_;  // full_model_state -> load
  size_t next_launch_ = 0;
  bool sync_ = true;
  bool in_backward_ = false;
};

}  // namespace

void LowLevelZeroPlugin::Options::validate() const {
  COLOSSAL_CHECK(stage == 1 || stage == 2, "[zero] zero_stage: expected 1 or 2, got ", stage,
                 " (stage 3 is the gemini plugin)");
  COLOSSAL_CHECK(bucket_bytes > 0, "[zero] bucket_mib: expected > 0, got ", bucket_bytes, " bytes");
  (void)amp::parse_precision(precision);
  if (!communication_dtype.empty()) (void)amp::parse_precision(communication_dtype);
  loss_scaler.validate();
}

LowLevelZeroPlugin::LowLevelZeroPlugin(Options options, PluginEnvironment env)
    : Plugin(std::move(env)), options_(std::move(options)) {
  options_.validate();
}

std::unique_ptr<ModelWrapper> LowLevelZeroPlugin::wrap_model(torch::nn::Module& model,
                                                             torch::optim::Optimizer& optimizer) {
  COLOSSAL_CHECK(dist::is_initialized(), "[zero] call colossal::dist::init() before boosting");
  auto o = options_;
  if (!o.scope.group.is_member()) o.scope.group = dims().gradient_group();
  return booster::wrap_whole(std::make_shared<ZeroModel>(model, optimizer, device(), o));
}

}  // namespace colossal::booster
