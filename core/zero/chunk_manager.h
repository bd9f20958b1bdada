#pragma once
// ZeRO-3's chunks: trainable parameters packed into equal contiguous chunks, each rank holding
// its shard of every chunk, and the moves of their bytes — gather (all-gather into the chunk's
// storage), release (the storage given back), gradient reduce-scatter, and the offload tier
// (master, moments and parameter shards on NVMe through io_uring, with a streamed AdamW step).
// What to move when is the placement policy's decision (placement_policy.h); the plugin glue
// (core/booster/plugins/gemini) drives both from its hooks.
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
#include "core/zero/chunk_search.h"
#include "core/zero/chunk_state.h"
#include "core/zero/master_shards.h"
#include "core/zero/placement_policy.h"

namespace colossal::zero {

/// A trainable parameter's place in the chunks.
struct ChunkParam {
  torch::Tensor param;
  std::string name;
  std::vector<int64_t> shape;
  size_t chunk = 0;
  int64_t offset = 0;  // in the chunk
  int64_t numel = 0;
  TensorState state = TensorState::kHold;
  size_t group = 0;           // the optimizer param group that held it
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
  bool pinned = false;       // kept gathered
  bool nvme_optim = false;   // master and moments live in the NVMe store (streamed step)
  bool nvme_param = false;   // the parameter shard lives there too
  torch::Tensor data;        // the full chunk (compute dtype); no memory while released
  torch::Tensor shard;       // this rank's piece, persistent (undefined when on NVMe)
  torch::Tensor master;      // fp32 piece the optimizer updates (== shard for fp32 in place)
  torch::Tensor grad;        // full gradients during backward
  torch::Tensor grad_shard;  // this rank's reduced gradients (accumulates)
  torch::Tensor reduce_out;
  dist::Handle gather_handle, reduce_handle;
  bool gathered = true, gathering = false;
  int64_t off_master = -1, off_m = -1, off_v = -1, off_shard = -1;  // NVMe offsets
  int64_t optim_step = 0;    // streamed AdamW steps taken
  size_t streamed_begin = 0, streamed_end = 0;  // its slices in ChunkManager::streamed()
  torch::Tensor staging;     // shard read from NVMe for a gather in flight
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
  /// The model's trainable parameters, in registration order (fp32; each must be the optimizer's
  /// or not, every optimizer tensor must be one of them).
  void collect(torch::nn::Module& model, const torch::optim::Optimizer& optimizer);
  /// Packs the parameters into chunks and gives each its storage, shard, master and gradient
  /// shard, at the tier the policy chooses; registers this rank's master slices with `shards`.
  /// Deferred parameters (a lazily built model) are initialised by `init` straight into their
  /// chunk. Unless `keep_gathered`, a chunk that is not pinned is released once its shard is
  /// taken, so building holds one full chunk at a time.
  void build(const PlacementPolicy& policy, MasterShards& shards, const torch::optim::Optimizer& optimizer,
             bool keep_gathered, const nn::ParameterInitializer* init);

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
  void start_gather(size_t ci);  // asynchronous (a prefetch)
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
  /// Waits reductions until at most `in_flight` remain, adding each into its gradient shard.
  void drain_reductions(size_t in_flight);
  /// Points each master slice's gradient at its place in the chunks' gradient shards.
  void bind_master_grads(MasterShards& shards);

  // ---- NVMe offload ----
  bool offloads() const { return nvme_ != nullptr; }
  /// AdamW over the NVMe-resident chunks, one at a time: the next chunk's master and moments
  /// are read while this one is updated; updated chunks are written back behind.
  void stream_optimizer_step(const torch::optim::Optimizer& optimizer, double grad_multiplier);
  std::vector<const StreamedSlice*> streamed_of_chunk(size_t ci) const;
  /// The fp32 masters of a chunk (this rank's piece), wherever they live.
  torch::Tensor read_master(size_t ci) const;
  /// Writes this rank's piece of a full fp32 chunk into master, shard and the gathered copy.
  void write_full(size_t ci, const torch::Tensor& full);
  /// The NVMe-streamed optimizer state as the checkpoint code names it, and its restore.
  checkpoint::NamedTensors streamed_state(std::map<std::string, std::string>* metadata) const;
  void load_streamed_state(const checkpoint::OptimizerStateSource& source);
  const offload::NvmeStore* nvme() const { return nvme_.get(); }

  // ---- counters ----
  int64_t gathers = 0, prefetches = 0, evictions = 0, peak_gathered_bytes = 0, clock = 0;

 private:
  torch::Tensor gather_source(Chunk& c);
  torch::TensorOptions chunk_options() const;

  Options options_;
  dist::Group group_;
  int ranks_ = 1, rank_ = 0;
  int64_t chunk_elements_ = 0;
  std::vector<ChunkParam> params_;
  std::map<std::string, size_t> index_of_name_;
  std::map<const void*, int64_t> slice_of_;
  std::vector<Chunk> chunks_;
  std::deque<size_t> reducing_;
  std::unique_ptr<offload::NvmeStore> nvme_;
  std::vector<StreamedSlice> streamed_;
  int64_t gathered_bytes_ = 0;
};

}  // namespace colossal::zero
