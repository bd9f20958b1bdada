#include "core/zero/chunk_manager.h"

#include <torch/torch.h>

#include <set>

#include "core/common/check.h"
#include "core/nn/deferred_init.h"
#include "core/optim/fused_adamw.h"

namespace colossal::zero {
namespace {

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

void check_streamable(const torch::optim::Optimizer& optimizer) {
  for (const auto& g : optimizer.param_groups()) {
    auto* o = dynamic_cast<const torch::optim::AdamWOptions*>(&g.options());
    COLOSSAL_CHECK(o != nullptr, "[gemini] NVMe optimizer offload streams an AdamW step; boost "
                   "torch::optim::AdamW or colossal FusedAdamW (got another optimizer)");
    COLOSSAL_CHECK(!o->amsgrad(), "[gemini] NVMe optimizer offload does not support amsgrad");
  }
}

}  // namespace

ChunkManager::ChunkManager(Options options, dist::Group group)
    : options_(std::move(options)),
      group_(std::move(group)),
      ranks_(group_.size()),
      rank_(group_.rank()),
      transfer_(options_.device) {}

torch::TensorOptions ChunkManager::chunk_options() const {
  return torch::TensorOptions().dtype(options_.compute_dtype).device(options_.device);
}

torch::TensorOptions ChunkManager::host_options(c10::ScalarType dtype) const {
  return offload::host_options(options_.device, dtype);
}

std::string ChunkManager::tier_label(Tier tier) const {
  switch (tier) {
    case Tier::kDevice: return options_.device.is_cpu() ? "host" : "device";
    case Tier::kHost: return "host";
    case Tier::kNvme: return "nvme";
  }
  return "?";
}

void ChunkManager::copy_between(const torch::Tensor& dst, const torch::Tensor& src) {
  if (dst.device() == src.device()) {
    dst.copy_(src);
    return;
  }
  auto fence = transfer_.copy(dst, src);
  if (dst.is_cpu()) transfer_.wait_on_host(fence);
  else transfer_.wait_on_device(fence);
}

void ChunkManager::set_state(ChunkParam& p, TensorState to) {
  check_transition(p.name, p.state, to);
  p.state = to;
}

int64_t ChunkManager::index_of(const std::string& name) const {
  auto it = index_of_name_.find(name);
  return it == index_of_name_.end() ? -1 : static_cast<int64_t>(it->second);
}

int64_t ChunkManager::slice_of(const torch::Tensor& param) const {
  auto it = slice_of_.find(param.unsafeGetTensorImpl());
  return it == slice_of_.end() ? -1 : it->second;
}

// ---- building -----------------------------------------------------------------------------

void ChunkManager::collect(torch::nn::Module& model, const torch::optim::Optimizer& optimizer) {
  std::set<const void*> in_optimizer;
  std::map<const void*, size_t> group_of;
  for (size_t gi = 0; gi < optimizer.param_groups().size(); ++gi)
    for (const auto& p : optimizer.param_groups()[gi].params()) {
      in_optimizer.insert(p.unsafeGetTensorImpl());
      group_of[p.unsafeGetTensorImpl()] = gi;
    }
  int64_t trainable = 0;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const bool frozen = !item.value().requires_grad();
    // A quantized base's weights have no elements left; integer parameters stay as they are.
    if (frozen && (item.value().numel() == 0 || !item.value().is_floating_point())) continue;
    COLOSSAL_CHECK(frozen || item.value().scalar_type() == c10::kFloat, "[gemini] parameter '", item.key(), "' is ",
                   item.value().scalar_type(), "; boost an fp32 model (precision is an option)");
    trainable += frozen ? 0 : 1;
    ChunkParam p;
    p.frozen = frozen;
    p.param = item.value();
    p.name = item.key();
    p.shape = item.value().sizes().vec();
    p.numel = item.value().numel();
    auto g = group_of.find(item.value().unsafeGetTensorImpl());
    if (g != group_of.end()) p.group = g->second;
    index_of_name_[p.name] = params_.size();
    params_.push_back(std::move(p));
    in_optimizer.erase(item.value().unsafeGetTensorImpl());
  }
  COLOSSAL_CHECK(in_optimizer.empty(), "[gemini] the optimizer holds ", in_optimizer.size(),
                 " tensor(s) that are not trainable parameters of the model being boosted");
  COLOSSAL_CHECK(trainable > 0, "[gemini] the model has no trainable parameters");
}

void ChunkManager::build(const PlacementPolicy& policy, MasterShards& shards, const torch::optim::Optimizer& optimizer,
                         bool keep_all_gathered, const nn::ParameterInitializer* init) {
  torch::NoGradGuard no_grad;
  // Trainable parameters first, then the frozen ones in chunks of their own (sized by a search
  // over their own sizes: a LoRA run's adapters are far smaller than the base they sit on).
  std::vector<size_t> trainable, frozen;
  for (size_t i = 0; i < params_.size(); ++i) (params_[i].frozen ? frozen : trainable).push_back(i);
  auto chunk_size_for = [&](const std::vector<size_t>& ids) {
    if (options_.chunk_elements > 0) return (options_.chunk_elements + ranks_ - 1) / ranks_ * ranks_;
    std::vector<int64_t> sizes;  // the parameters that get sharded chunks (all of them if none is large)
    for (size_t i : ids)
      if (params_[i].numel >= options_.keep_gathered_below) sizes.push_back(params_[i].numel);
    if (sizes.empty())
      for (size_t i : ids) sizes.push_back(params_[i].numel);
    auto search = options_.search;
    search.ranks = ranks_;
    return search_chunk_size(sizes, search).chunk_elements;
  };
  auto pack = [&](const std::vector<size_t>& ids, int64_t capacity) {
    int64_t used = capacity;
    for (size_t i : ids) {
      COLOSSAL_CHECK(params_[i].numel <= capacity, "[gemini] parameter '", params_[i].name, "' (", params_[i].numel,
                     " elements) does not fit chunk_elements = ", capacity);
      if (used + params_[i].numel > capacity) {
        chunks_.emplace_back();
        chunks_.back().elements = capacity;
        chunks_.back().frozen = params_[i].frozen;
        used = 0;
      }
      params_[i].chunk = chunks_.size() - 1;
      params_[i].offset = used;
      chunks_.back().params.push_back(i);
      used += params_[i].numel;
    }
  };
  // Pack in registration order (what forward usually follows); parameters smaller than
  // keep_gathered_below go last, into chunks that stay gathered (not worth a collective each),
  // sized to what they hold (a full-size chunk of biases would be mostly padding). Returns the
  // number of chunks of large parameters.
  auto pack_all = [&](const std::vector<size_t>& ids, int64_t E) {
    std::vector<size_t> large, small;
    for (size_t i : ids) (params_[i].numel < options_.keep_gathered_below ? small : large).push_back(i);
    const size_t first = chunks_.size();
    pack(large, E);
    const int64_t large_chunks = static_cast<int64_t>(chunks_.size() - first);
    int64_t small_total = 0;
    for (size_t i : small) small_total += params_[i].numel;
    pack(small, std::min(E, (small_total + ranks_ - 1) / ranks_ * ranks_));
    return large_chunks;
  };
  const int64_t E = chunk_size_for(trainable);
  chunk_elements_ = E;
  const int64_t large_chunks = pack_all(trainable, E);
  const int64_t n_trainable = static_cast<int64_t>(chunks_.size());
  const int64_t large_frozen = frozen.empty() ? 0 : pack_all(frozen, chunk_size_for(frozen));
  const int64_t n = static_cast<int64_t>(chunks_.size());

  // Where each chunk lives; the NVMe store is sized for what goes there.
  const Tier offload_tier = options_.offload_device == "nvme" ? Tier::kNvme : Tier::kHost;
  const int64_t elem = c10::elementSize(options_.compute_dtype);
  int64_t nvme_bytes = 0, S = E / ranks_;  // S: the largest trainable shard
  bool streams_optimizer = false;
  for (int64_t ci = 0; ci < n; ++ci) {
    auto& c = chunks_[ci];
    // The fractions apply to the trainable and to the frozen chunks each (a frozen chunk has no
    // optimizer state to offload; its parameter shard follows offload_param_frac alone).
    auto t = c.frozen ? policy.tier(ci - n_trainable, n - n_trainable, large_frozen)
                      : policy.tier(ci, n_trainable, large_chunks);
    if (c.frozen) t.offload_optim = false;
    streams_optimizer = streams_optimizer || (t.offload_optim && offload_tier == Tier::kNvme);
    c.keep_gathered = t.keep_gathered;
    c.optim_tier = t.offload_optim ? offload_tier : Tier::kDevice;
    c.param_tier = t.offload_param ? offload_tier : Tier::kDevice;
    const int64_t shard = c.elements / ranks_;
    if (c.nvme_optim()) nvme_bytes += 3 * (shard * 4 + 4096);
    if (c.nvme_param()) nvme_bytes += shard * elem + 4096;
  }
  if (nvme_bytes > 0) {
    if (streams_optimizer) check_streamable(optimizer);
    nvme_ = std::make_unique<offload::NvmeStore>(options_.nvme_dir, nvme_bytes, "rank" + std::to_string(rank_));
  }
  torch::Tensor zeros;  // written as the initial moments
  for (int64_t ci = 0; ci < n; ++ci) {
    auto& c = chunks_[ci];
    c.shard_elements = c.elements / ranks_;
    c.data = torch::zeros({c.elements}, chunk_options());
    for (size_t pi : c.params) {
      auto& p = params_[pi];
      auto region = c.data.narrow(0, p.offset, p.numel);
      if (nn::is_deferred(p.param)) {
        // A lazily built model: the values are made here, straight into the chunk.
        COLOSSAL_CHECK(init != nullptr, "[gemini] parameter '", p.name, "' was never materialised and the model "
                       "does not say how to initialise it (no colossal::nn::ParameterInitializer)");
        auto full = nn::transient_empty(p.shape);
        init->init_parameter(p.name, full);
        region.copy_(full.reshape({-1}));
      } else {
        region.copy_(p.param.detach().reshape({-1}));
      }
      p.param.set_data(region.view(p.shape));
    }
    auto mine = c.data.narrow(0, rank_ * c.shard_elements, c.shard_elements);
    c.shard = c.param_tier == Tier::kDevice ? mine.clone()
                                            : torch::empty({c.shard_elements}, host_options(options_.compute_dtype));
    if (c.param_tier != Tier::kDevice) c.shard.copy_(mine);
    // A separate fp32 master: a low-precision working copy, or an optimizer state on another
    // tier than the parameter shard (on a CPU build that tier is host memory too, so the same
    // path runs and is tested).
    const bool separate_master = options_.compute_dtype != c10::kFloat || c.optim_tier != c.param_tier;
    if (c.frozen) {
      c.master = torch::Tensor();  // nothing steps it
    } else if (separate_master) {
      const auto where = c.optim_tier == Tier::kDevice ? chunk_options().dtype(torch::kFloat32)
                                                       : host_options(torch::kFloat32);
      c.master = torch::empty({c.shard_elements}, where);
      c.master.copy_(c.shard);
    } else {
      c.master = c.shard;
    }
    // The reduced gradients get memory at the first reduction, not here: building a lazily
    // constructed model then holds no more than a chunk at a time. They live where the
    // optimizer reads them.
    if (!c.frozen)
      c.grad_shard = nn::deferred_empty({c.shard_elements}, c.optim_tier == Tier::kDevice
                                                               ? chunk_options()
                                                               : host_options(options_.compute_dtype));
    if (c.nvme_optim()) {
      if (!zeros.defined()) zeros = torch::zeros({S}, torch::kFloat32);
      auto z = zeros.narrow(0, 0, c.shard_elements);
      c.off_master = nvme_->allocate(c.shard_elements * 4);
      c.off_m = nvme_->allocate(c.shard_elements * 4);
      c.off_v = nvme_->allocate(c.shard_elements * 4);
      nvme_->write(c.master, c.off_master);
      nvme_->write(z, c.off_m);
      nvme_->write(z, c.off_v);
      c.master = torch::Tensor();
      shards.streamed_grads().push_back(c.grad_shard);
    }
    if (c.nvme_param()) {
      c.off_shard = nvme_->allocate(c.shard_elements * elem);
      nvme_->write(c.shard, c.off_shard);  // the shard is on the host (offload tier)
      c.shard = torch::Tensor();
    }
    gathered_bytes_ += c.bytes();
    // Chunks the first step will not keep gathered give their memory back at once, so building
    // never holds the whole model (what lets a lazily built model boost within its shards).
    if (!keep_all_gathered && !c.keep_gathered) release(static_cast<size_t>(ci));
    // The optimizer's view: each parameter's intersection with this rank's shard.
    if (c.frozen) continue;
    const int64_t lo = rank_ * c.shard_elements, hi = lo + c.shard_elements;
    c.streamed_begin = streamed_.size();
    for (size_t pi : c.params) {
      auto& p = params_[pi];
      const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
      if (a >= b) continue;
      if (c.nvme_optim()) {
        streamed_.push_back({pi, static_cast<size_t>(ci), a - p.offset, a - lo, b - a});
        continue;
      }
      MasterSlice s;
      s.name = p.name;
      s.shape = p.shape;
      s.offset = a - p.offset;
      s.master = c.master.narrow(0, a - lo, b - a);
      p.slice = static_cast<int64_t>(shards.slices().size());
      p.slice_offset = a - lo;
      slice_of_[p.param.unsafeGetTensorImpl()] = p.slice;
      shards.slices().push_back(std::move(s));
    }
    c.streamed_end = streamed_.size();
  }
}

// ---- moving chunks ------------------------------------------------------------------------

// The shard to all-gather from, on the device: in place, copied up from the host (the compute
// stream waits for the copy, the host does not), or read from NVMe (unless a prefetch did).
torch::Tensor ChunkManager::gather_source(Chunk& c) {
  if (c.param_tier == Tier::kDevice) return c.shard;
  torch::Tensor host = c.shard;
  if (c.nvme_param()) {
    if (!c.host_staging.defined()) {
      c.host_staging = torch::empty({c.shard_elements}, host_options(options_.compute_dtype));
      nvme_->read(c.host_staging, c.off_shard);
    }
    host = c.host_staging;
  }
  if (options_.device.is_cpu()) {
    c.staging = host;
    return host;
  }
  c.staging = torch::empty({c.shard_elements}, chunk_options());
  auto fence = transfer_.copy(c.staging, host);
  transfer_.wait_on_device(fence);
  return c.staging;
}

void ChunkManager::launch_gather(Chunk& c) {
  c.gather_handle = dist::all_gather_async(c.data, gather_source(c), group_);
  c.gathering = true;
}

void ChunkManager::gather(size_t ci) {
  auto& c = chunks_[ci];
  c.last_use = ++clock;
  if (c.gathered) return;
  if (c.loading) launch_loaded();
  if (c.gathering) {
    c.gather_handle.wait();
    c.gathering = false;
  } else {
    alloc_storage(c.data, c.bytes());
    dist::all_gather(c.data, gather_source(c), group_);
    gathered_bytes_ += c.bytes();
    ++gathers;
  }
  c.staging = c.host_staging = torch::Tensor();
  peak_gathered_bytes = std::max(peak_gathered_bytes, gathered_bytes_);
  c.gathered = true;
  for (size_t pi : c.params) set_state(params_[pi], TensorState::kHold);
}

void ChunkManager::start_gather(size_t ci) {
  auto& c = chunks_[ci];
  if (c.gathered || c.gathering || c.loading) return;
  alloc_storage(c.data, c.bytes());
  ++prefetches;
  gathered_bytes_ += c.bytes();
  if (c.nvme_param()) {
    // Read now, all-gather later: the read runs while the modules before this chunk compute.
    c.host_staging = torch::empty({c.shard_elements}, host_options(options_.compute_dtype));
    c.load_ticket = nvme_->read_async(c.host_staging, c.off_shard);
    c.loading = true;
    loading_.push_back(ci);
    ++nvme_prefetch_reads;
    return;
  }
  launch_gather(c);
}

void ChunkManager::launch_loaded() {
  for (size_t ci : loading_) {
    auto& c = chunks_[ci];
    nvme_->wait(c.load_ticket);
    c.loading = false;
    launch_gather(c);
  }
  loading_.clear();
}

void ChunkManager::finish_gathers() {
  launch_loaded();
  for (auto& c : chunks_) {
    if (!c.gathering) continue;
    c.gather_handle.wait();
    c.gathering = false;
    c.gathered = true;
    c.staging = c.host_staging = torch::Tensor();
    for (size_t pi : c.params) set_state(params_[pi], TensorState::kHold);
  }
}

bool ChunkManager::releasable(size_t ci) const {
  const auto& c = chunks_[ci];
  if (!c.gathered || c.gathering || c.loading) return false;
  for (size_t pi : c.params) {
    auto s = params_[pi].state;
    if (s == TensorState::kCompute || s == TensorState::kReadyForReduce) return false;
  }
  return true;
}

void ChunkManager::release(size_t ci) {
  auto& c = chunks_[ci];
  for (size_t pi : c.params)
    if (params_[pi].state != TensorState::kFree) set_state(params_[pi], TensorState::kFree);
  free_storage(c.data);
  c.gathered = false;
  gathered_bytes_ -= c.bytes();
}

void ChunkManager::after_step(bool stepped) {
  torch::NoGradGuard no_grad;
  finish_gathers();  // a prefetch still in flight is finished, then released by the caller
  for (auto& c : chunks_) {
    c.staging = c.host_staging = torch::Tensor();
    if (c.frozen) continue;  // unchanged: its shard and any gathered copy stay valid
    // Updated masters to the shards (a CPU step's result goes up without blocking the host).
    if (stepped && !c.nvme_optim() && !c.master.is_same(c.shard)) copy_between(c.shard, c.master);
    if (!c.gathered || !c.keep_gathered) continue;
    dist::all_gather(c.data, gather_source(c), group_);  // refresh the kept copy
    c.staging = c.host_staging = torch::Tensor();
    for (size_t pi : c.params)
      if (params_[pi].state != TensorState::kHold) set_state(params_[pi], TensorState::kHold);
  }
}

// ---- gradients ----------------------------------------------------------------------------

bool ChunkManager::accumulate_gradient(size_t pi) {
  auto& p = params_[pi];
  auto& c = chunks_[p.chunk];
  set_state(p, TensorState::kReadyForReduce);
  torch::NoGradGuard no_grad;
  if (!c.grad.defined()) c.grad = torch::zeros({c.elements}, c.data.options());
  const auto& g = p.param.grad();
  if (g.defined()) {
    c.grad.narrow(0, p.offset, p.numel).copy_(g.reshape({-1}));
    p.param.mutable_grad() = torch::Tensor();
  }
  return ++c.ready == static_cast<int64_t>(c.params.size());
}

void ChunkManager::reduce(size_t ci) {
  auto& c = chunks_[ci];
  if (!c.grad.defined()) c.grad = torch::zeros({c.elements}, c.data.options());
  c.reduce_out = torch::empty({c.shard_elements}, c.grad.options());
  c.reduce_handle = dist::reduce_scatter_async(c.reduce_out, c.grad, group_, dist::ReduceOp::kAvg);
  reducing_.push_back(ci);
  for (size_t pi : c.params)
    if (params_[pi].state == TensorState::kReadyForReduce) set_state(params_[pi], TensorState::kHoldAfterBwd);
}

void ChunkManager::accumulate_reduced(Chunk& c, const torch::Tensor& reduced) {
  torch::NoGradGuard no_grad;
  nn::allocate_zeros(c.grad_shard);  // in place: the masters' and streamed views stay valid
  c.grad_shard.add_(reduced);
}

void ChunkManager::finish_gradient_down(GradientDown& g) {
  transfer_.wait_on_host(g.fence);
  accumulate_reduced(chunks_[g.chunk], g.host);
}

void ChunkManager::drain_reductions(size_t in_flight) {
  while (reducing_.size() > in_flight) {
    size_t ci = reducing_.front();
    reducing_.pop_front();
    auto& c = chunks_[ci];
    c.reduce_handle.wait();
    if (c.grad_shard.device() == c.reduce_out.device()) {
      accumulate_reduced(c, c.reduce_out);
    } else {
      // Down to the host while backward goes on; added in when it has arrived.
      GradientDown g{ci, torch::empty({c.shard_elements}, host_options(c.reduce_out.scalar_type())), {}};
      g.fence = transfer_.copy(g.host, c.reduce_out);
      coming_down_.push_back(std::move(g));
    }
    c.grad = torch::Tensor();
    c.reduce_out = torch::Tensor();
  }
  while (coming_down_.size() > in_flight) {
    finish_gradient_down(coming_down_.front());
    coming_down_.pop_front();
  }
}

void ChunkManager::bind_master_grads(MasterShards& shards) {
  for (auto& c : chunks_)
    for (size_t pi : c.params) {
      const auto& p = params_[pi];
      if (p.slice >= 0)
        shards.slices()[p.slice].grad = c.grad_shard.narrow(0, p.slice_offset, shards.slices()[p.slice].master.numel());
    }
}

// ---- NVMe offload -------------------------------------------------------------------------

std::vector<const StreamedSlice*> ChunkManager::streamed_of_chunk(size_t ci) const {
  std::vector<const StreamedSlice*> out;
  for (size_t k = chunks_[ci].streamed_begin; k < chunks_[ci].streamed_end; ++k) out.push_back(&streamed_[k]);
  return out;
}

void ChunkManager::stream_optimizer_step(const torch::optim::Optimizer& optimizer, double multiplier) {
  struct Buffers {
    size_t chunk = 0;
    torch::Tensor master, m, v, shard;
    std::vector<uint64_t> tickets;
  };
  std::vector<size_t> order;
  for (size_t ci = 0; ci < chunks_.size(); ++ci)
    if (chunks_[ci].nvme_optim()) order.push_back(ci);
  auto start_read = [&](size_t ci) {
    Buffers b;
    b.chunk = ci;
    auto& c = chunks_[ci];
    for (auto* t : {&b.master, &b.m, &b.v}) *t = torch::empty({c.shard_elements}, torch::kFloat32);
    b.tickets = {nvme_->read_async(b.master, c.off_master), nvme_->read_async(b.m, c.off_m),
                 nvme_->read_async(b.v, c.off_v)};
    return b;
  };
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
      const auto& opts =
          static_cast<const torch::optim::AdamWOptions&>(optimizer.param_groups()[params_[s->param].group].options());
      optim::fused_adamw_update(pm, m, v, g, torch::Tensor(), opts, c.optim_step);
    }
    b.tickets = {nvme_->write_async(b.master, c.off_master), nvme_->write_async(b.m, c.off_m),
                 nvme_->write_async(b.v, c.off_v)};  // write-behind
    if (c.nvme_param()) {
      b.shard = options_.compute_dtype == c10::kFloat ? b.master : b.master.to(options_.compute_dtype);
      b.tickets.push_back(nvme_->write_async(b.shard, c.off_shard));
    } else {
      copy_between(c.shard, b.master);
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

torch::Tensor ChunkManager::read_master(size_t ci) const {
  const auto& c = chunks_[ci];
  if (c.frozen) {
    if (!c.nvme_param()) return c.shard.to(torch::kFloat32);
    auto mine = torch::empty({c.shard_elements}, host_options(options_.compute_dtype));
    nvme_->read(mine, c.off_shard);
    return mine.to(torch::kFloat32);
  }
  if (c.nvme_optim()) {
    auto mine = torch::empty({c.shard_elements}, torch::kFloat32);
    nvme_->read(mine, c.off_master);
    return mine;
  }
  return c.master.scalar_type() == torch::kFloat32 ? c.master : c.master.to(torch::kFloat32);
}

void ChunkManager::write_full(size_t ci, const torch::Tensor& full) {
  torch::NoGradGuard no_grad;
  auto& c = chunks_[ci];
  auto piece = full.narrow(0, rank_ * c.shard_elements, c.shard_elements).contiguous();
  if (c.frozen) {
    if (c.nvme_param()) nvme_->write(piece.to(torch::kCPU, options_.compute_dtype), c.off_shard);
    else c.shard.copy_(piece);
    if (c.gathered) c.data.copy_(full);
    return;
  }
  if (c.nvme_optim()) nvme_->write(piece.to(torch::kCPU), c.off_master);
  else c.master.copy_(piece);
  if (c.nvme_param()) nvme_->write(piece.to(torch::kCPU, options_.compute_dtype), c.off_shard);
  else if (c.nvme_optim() || !c.master.is_same(c.shard)) c.shard.copy_(piece);
  if (c.gathered) c.data.copy_(full);
}

checkpoint::NamedTensors ChunkManager::streamed_state(std::map<std::string, std::string>* metadata) const {
  checkpoint::NamedTensors out;
  if (!nvme_) return out;
  for (size_t ci = 0; ci < chunks_.size(); ++ci) {
    const auto& c = chunks_[ci];
    if (!c.nvme_optim() || c.optim_step == 0) continue;
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

void ChunkManager::load_streamed_state(const checkpoint::OptimizerStateSource& source) {
  if (!nvme_) return;
  for (size_t ci = 0; ci < chunks_.size(); ++ci) {
    auto& c = chunks_[ci];
    if (!c.nvme_optim()) continue;
    auto m = torch::zeros({c.shard_elements}, torch::kFloat32), v = torch::zeros_like(m);
    int64_t step = 0;
    for (const StreamedSlice* s : streamed_of_chunk(ci)) {
      const auto& name = params_[s->param].name;
      if (!source.contains(name + ".exp_avg")) continue;
      COLOSSAL_CHECK(source.saved_numel(name + ".exp_avg") == params_[s->param].numel, "[checkpoint] optimizer state '",
                     name, ".exp_avg' was saved for ", source.saved_numel(name + ".exp_avg"),
                     " elements; the parameter has ", params_[s->param].numel);
      m.narrow(0, s->shard_offset, s->len).copy_(source.read_range(name + ".exp_avg", s->param_offset, s->len));
      v.narrow(0, s->shard_offset, s->len).copy_(source.read_range(name + ".exp_avg_sq", s->param_offset, s->len));
      step = std::max(step, source.read_scalar(name + ".step").item<int64_t>());
    }
    nvme_->write(m, c.off_m);
    nvme_->write(v, c.off_v);
    c.optim_step = step;
  }
}

}  // namespace colossal::zero
