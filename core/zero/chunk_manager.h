#pragma once
// ZeRO-3's chunks: parameters packed into equal contiguous chunks, each rank holding its shard
// of every chunk, and the moves of their bytes — gather (all-gather into the chunk's storage),
// release (the storage given back), gradient reduce-scatter, and the tiers below the device.
// Frozen parameters (a LoRA run's base) go into chunks of their own: sharded, gathered for
// compute and offloadable like the others, but with no master, gradient or optimizer state. What to move when is the placement policy's decision (placement_policy.h); the plugin
// glue (core/booster/plugins/gemini) drives both from its hooks.
//
// Tiers (ColossalAI's heterogeneous memory). Gathered chunks and the gradients being reduced
// live on the compute device. A chunk's persistent pieces — its parameter shard, and its fp32
// master with the optimizer's moments — each live on one tier:
//   device  beside the computation (GPU memory on CUDA);
//   host    pinned host memory on CUDA, so the moves are asynchronous copies on a side stream
//           (offload/transfer_stream.h): shards go up before their all-gather, reduced gradients
//           come down while backward goes on, updated masters go up after the CPU step;
//   nvme    the NVMe store through io_uring: a prefetched shard is read while the modules
//           before it run and all-gathered at the next access; master and moments stream
//           through an AdamW step with read-ahead and write-behind.
// On the CPU the device and host tiers are the same memory; the same code runs, copies inline.
//
// A chunk's full buffer is gathered and released by giving its storage memory and taking it
// back; parameters stay views of it throughout (and so do tensors autograd saved from them,
// which therefore see the re-gathered values in backward).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dist/collectives.h"
#include "core/nn/deferred_init.h"
#include "core/offload/nvme_store.h"
#include "core/offload/transfer_stream.h"
#include "core/zero/chunk_search.h"
#include "core/zero/chunk_state.h"
#include "core/zero/master_shards.h"
#include "core/zero/placement_policy.h"

namespace colossal::zero {

/// Where a persistent piece of a chunk lives (see the top of this file).
enum class Tier { kDevice, kHost, kNvme };

/// A parameter's place in the chunks.
struct ChunkParam {
  torch::Tensor param;
  std::string name;
  std::vector<int64_t> shape;
  size_t chunk = 0;
  int64_t offset = 0;  // in the chunk
  int64_t numel = 0;
  TensorState state = TensorState::kHold;
  size_t group = 0;           // the optimizer param group that held it
  bool frozen = false;        // requires no gradient: never reduced or stepped
  bool used = false;          // its module finished a forward in this pass
  int64_t slice = -1;         // index into MasterShards::slices(), -1: none on this rank
  int64_t slice_offset = 0;   // where that slice starts in the chunk's shard
};

/// A slice whose optimizer step is streamed from NVMe (not in the user's optimizer).
struct StreamedSlice {
  size_t param = 0, chunk = 0;
  int64_t param_offset = 0;  // first element of the parameter
  int64_t shard_offset = 0;  // where it sits in the chunk's shard
  int64_t len = 0;
};

struct Chunk {
  std::vector<size_t> params;
  int64_t elements = 0, shard_elements = 0;
  bool keep_gathered = false;       // never released
  bool frozen = false;              // frozen parameters only: no master, gradients or optimizer state
  Tier param_tier = Tier::kDevice;  // where `shard` lives
  Tier optim_tier = Tier::kDevice;  // where `master`, the moments and `grad_shard` live
  bool nvme_optim() const { return optim_tier == Tier::kNvme; }  // the step is streamed
  bool nvme_param() const { return param_tier == Tier::kNvme; }
  torch::Tensor data;        // the full chunk (compute dtype, device); no memory while released
  torch::Tensor shard;       // this rank's piece, persistent (undefined when on NVMe)
  torch::Tensor master;      // fp32 piece the optimizer updates (== shard when dtype and tier agree;
                             // undefined for a frozen chunk)
  torch::Tensor grad;        // full gradients during backward (device)
  torch::Tensor grad_shard;  // this rank's reduced gradients, accumulated on the optimizer's tier
  torch::Tensor reduce_out;
  dist::Handle gather_handle, reduce_handle;
  bool gathered = true, gathering = false;
  bool loading = false;      // a prefetched shard is being read from NVMe
  uint64_t load_ticket = 0;
  int64_t off_master = -1, off_m = -1, off_v = -1, off_shard = -1;  // NVMe offsets
  int64_t optim_step = 0;    // streamed AdamW steps taken
  size_t streamed_begin = 0, streamed_end = 0;  // its slices in ChunkManager::streamed()
  torch::Tensor staging;       // the shard on the device for a gather in flight
  torch::Tensor host_staging;  // the shard read from NVMe
  int64_t ready = 0;         // parameters whose gradient arrived in this backward
  int64_t used = 0;          // parameters whose module finished a forward in this pass
  int64_t last_use = 0;
  int64_t bytes() const { return elements * static_cast<int64_t>(data.element_size()); }
};

class ChunkManager {
 public:
  struct Options {
    int64_t chunk_elements = 0;          // 0: searched
    int64_t keep_gathered_below = 4096;  // smaller parameters go into chunks that stay gathered
    ChunkSearchOptions search;
    std::string offload_device = "cpu";  // cpu | nvme
    std::string nvme_dir;
    c10::ScalarType compute_dtype = c10::kFloat;
    c10::Device device = c10::kCPU;
  };
  ChunkManager(Options options, dist::Group group);

  // ---- building ----
  /// The model's parameters, in registration order: the trainable ones (fp32; each must be the
  /// optimizer's or not, every optimizer tensor must be one of them) and the frozen floating ones
  /// with elements (a quantized base's emptied weights stay out).
  void collect(torch::nn::Module& model, const torch::optim::Optimizer& optimizer);
  /// Packs the parameters into chunks and gives each its storage, shard, master and gradient
  /// shard, at the tier the policy chooses; registers this rank's master slices with `shards`.
  /// Deferred parameters (a lazily built model) are initialised by `init` straight into their
  /// chunk. Unless `keep_all_gathered`, a chunk that is not kept gathered is released once its shard is
  /// taken, so building holds one full chunk at a time.
  void build(const PlacementPolicy& policy, MasterShards& shards, const torch::optim::Optimizer& optimizer,
             bool keep_all_gathered, const nn::ParameterInitializer* init);

  std::vector<ChunkParam>& params() { return params_; }
  const std::vector<ChunkParam>& params() const { return params_; }
  std::vector<Chunk>& chunks() { return chunks_; }
  const std::vector<Chunk>& chunks() const { return chunks_; }
  /// The parameter's index by its name in the model, or -1.
  int64_t index_of(const std::string& name) const;
  /// The master slice index of a working parameter (its TensorImpl), or -1.
  int64_t slice_of(const torch::Tensor& param) const;
  int64_t chunk_elements() const { return chunk_elements_; }
  int rank() const { return rank_; }
  const dist::Group& group() const { return group_; }
  void set_state(ChunkParam& p, TensorState to);

  // ---- moving chunks ----
  void gather(size_t ci);        // blocking (waits an in-flight prefetch)
  /// Asynchronous (a prefetch). A shard on NVMe is read first; its all-gather starts at the
  /// next launch_loaded() or gather().
  void start_gather(size_t ci);
  /// Starts the all-gathers of prefetched shards read from NVMe, in the order they were
  /// prefetched (every rank calls this at the same points, so the collectives match).
  void launch_loaded();
  /// Waits every prefetch still in flight.
  void finish_gathers();
  bool releasable(size_t ci) const;
  void release(size_t ci);
  /// After an optimizer step: shards take the updated masters; pinned chunks re-gather from them.
  void after_step(bool stepped);
  int64_t gathered_bytes() const { return gathered_bytes_; }

  // ---- gradients ----
  /// Copies parameter `pi`'s gradient into its chunk's gradient buffer (and frees .grad()).
  /// Returns true when the chunk's last gradient of this backward arrived.
  bool accumulate_gradient(size_t pi);
  /// Launches the chunk's reduce-scatter (every parameter then counts as reduced).
  void reduce(size_t ci);
  /// Waits reductions until at most `in_flight` remain, adding each into its gradient shard
  /// (on another tier: once its copy down has arrived; all of them when `in_flight` is 0).
  void drain_reductions(size_t in_flight);
  /// Points each master slice's gradient at its place in the chunks' gradient shards.
  void bind_master_grads(MasterShards& shards);

  // ---- NVMe offload ----
  bool offloads() const { return nvme_ != nullptr; }
  /// AdamW over the NVMe-resident chunks, one at a time: the next chunk's master and moments
  /// are read while this one is updated; updated chunks are written back behind.
  void stream_optimizer_step(const torch::optim::Optimizer& optimizer, double grad_multiplier);
  std::vector<const StreamedSlice*> streamed_of_chunk(size_t ci) const;
  /// The fp32 masters of a chunk (this rank's piece), wherever they live; a frozen chunk's
  /// shard in fp32.
  torch::Tensor read_master(size_t ci) const;
  /// Writes this rank's piece of a full fp32 chunk into master (unless frozen), shard and the
  /// gathered copy.
  void write_full(size_t ci, const torch::Tensor& full);
  /// The NVMe-streamed optimizer state as the checkpoint code names it, and its restore.
  checkpoint::NamedTensors streamed_state(std::map<std::string, std::string>* metadata) const;
  void load_streamed_state(const checkpoint::OptimizerStateSource& source);
  const offload::NvmeStore* nvme() const { return nvme_.get(); }
  const offload::TransferStream& transfers() const { return transfer_; }
  /// The tier's name in memory reports (as MemoryReport names devices): device, host or nvme.
  std::string tier_label(Tier tier) const;

  // ---- counters ----
  int64_t gathers = 0, prefetches = 0, evictions = 0, peak_gathered_bytes = 0, clock = 0;
  int64_t nvme_prefetch_reads = 0;  // shards read from NVMe ahead of their gather

 private:
  // A gradient shard reduced on the device, on its way to the optimizer's tier.
  struct GradientDown {
    size_t chunk = 0;
    torch::Tensor host;
    offload::Fence fence;
  };
  torch::Tensor gather_source(Chunk& c);
  void launch_gather(Chunk& c);
  void accumulate_reduced(Chunk& c, const torch::Tensor& reduced);
  void finish_gradient_down(GradientDown& g);
  /// Copies between tiers: up to the device without blocking the host; down to the host, the
  /// host waits.
  void copy_between(const torch::Tensor& dst, const torch::Tensor& src);
  torch::TensorOptions chunk_options() const;
  torch::TensorOptions host_options(c10::ScalarType dtype) const;

  Options options_;
  dist::Group group_;
  int ranks_ = 1, rank_ = 0;
  int64_t chunk_elements_ = 0;
  std::vector<ChunkParam> params_;
  std::map<std::string, size_t> index_of_name_;
  std::map<const void*, int64_t> slice_of_;
  std::vector<Chunk> chunks_;
  std::deque<size_t> reducing_;
  std::deque<GradientDown> coming_down_;
  std::vector<size_t> loading_;  // prefetched NVMe reads, in order
  offload::TransferStream transfer_;
  std::unique_ptr<offload::NvmeStore> nvme_;
  std::vector<StreamedSlice> streamed_;
  int64_t gathered_bytes_ = 0;
};

}  // namespace colossal::zero
