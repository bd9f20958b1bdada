#pragma once
// How a wrapped model's state maps onto checkpoint files, as a value.
//
// Two parts compose it:
//  * a StateStore, written by the data-parallel plugin: where the full-precision tensors live
//    (the parameters themselves, fp32 masters, ZeRO shards, Gemini chunks) and how the
//    optimizer's state is sliced over its ranks;
//  * a ModelSplit, filled in by a plugin that gives each rank another part of the model (the
//    hybrid plugin: tensor-parallel slices, pipeline stages, experts). Empty: every rank holds
//    the whole model.
// CheckpointLayout turns both into what checkpointing and `colossal verify` read: whole tensors
// to save, where a load writes, optimizer slices and who writes which.
#include <torch/nn/module.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/checkpoint/optimizer_io.h"
#include "core/checkpoint/safetensors.h"
#include "core/dist/group.h"
#include "core/parallel/tensor/shard.h"

namespace colossal::booster {

class StateStore {
 public:
  virtual ~StateStore() = default;
  /// This rank's model state in full precision, each tensor whole over the data-parallel ranks
  /// (sharded state gathered): what a save writes and what a load writes into, in place.
  /// Mixed precision gives the fp32 masters in place of the working parameters. Collective.
  /// `trainable_only`: the parameters that require gradients (a LoRA run's checkpoint), so a
  /// sharded frozen base is not gathered for nothing.
  virtual checkpoint::NamedTensors model_state(const torch::nn::Module& model, bool trainable_only = false) const;
  /// Called after a load wrote into model_state() (masters -> working, gathered -> shards).
  virtual void after_load() {}
  /// The tensors the optimizer updates, as slices of named parameters (what optimizer state is
  /// saved and loaded by). Default: the whole tensors of model_state().
  virtual std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module& model) const;
  /// The group over which optimizer_slices() are spread (ZeRO); nullptr: each rank holds whole
  /// tensors.
  virtual const dist::Group* shard_group() const { return nullptr; }
  /// Every parameter's gradient as the optimizer gets it (reduced, unscaled, before clipping),
  /// whole and in fp32 (see CheckpointLayout::full_gradients). Collective. Default: the .grad()
  /// of optimizer_slices(), assembled over shard_group().
  virtual checkpoint::NamedTensors gradients(const torch::nn::Module& model) const;
  /// Optimizer state kept outside the optimizer (streamed from NVMe), as optimizer_state()
  /// would write it; `metadata` gets the slices' offsets.
  virtual checkpoint::NamedTensors external_optimizer_state(std::map<std::string, std::string>*) const { return {}; }
  virtual void load_external_optimizer_state(const checkpoint::OptimizerStateSource&) {}

  bool sharded() const { return shard_group() && shard_group()->size() > 1; }
};

/// Which part of the model this rank holds, when ranks hold different parts.
struct ModelSplit {
  // Tensor parallelism: parameters split along a dimension (name -> spec; dim < 0: whole).
  std::map<std::string, parallel::ShardSpec> tp_specs;
  int tp = 1, tp_rank = 0;
  // Pipeline parallelism: the stages' group (not a member: no pipeline).
  dist::Group pipeline;
  // Expert parallelism: the group sharing out the experts, this rank's expert parameters and its
  // place among the replicas holding the same experts.
  dist::Group ep;
  std::set<std::string> experts;
  int edp_rank = 0;
  // This rank's place among the data-parallel replicas of its part.
  int dp_rank = 0;

  bool pipelined() const { return pipeline.is_member() && pipeline.size() > 1; }
  bool expert_parallel() const { return ep.is_member() && ep.size() > 1; }
};

class CheckpointLayout {
 public:
  CheckpointLayout() : CheckpointLayout(std::make_shared<StateStore>()) {}
  explicit CheckpointLayout(std::shared_ptr<StateStore> store, ModelSplit split = {});

  /// This rank's tensors, whole (tensor-parallel slices gathered over tp and kept, so a load can
  /// write into them and after_model_load() copy each rank's slice back). Collective.
  checkpoint::NamedTensors full_model_state(const torch::nn::Module& model, bool trainable_only = false) const;
  /// What a save writes: full_model_state(), plus on the rank that writes (the pipeline's and
  /// the ep group's first) the tensors other stages and ep ranks hold, so the files hold the
  /// whole model. Collective.
  checkpoint::NamedTensors model_state_to_save(const torch::nn::Module& model, bool trainable_only = false) const;
  /// Names of the whole model's state that other ranks hold (pipeline stages, other experts): a
  /// load skips them instead of calling them unexpected.
  const std::set<std::string>& state_held_elsewhere() const { return elsewhere_; }
  /// After a load wrote into full_model_state(): slices back, then the store's copy-back.
  void after_model_load();

  /// Optimizer slices as checkpoints name them. Under tensor parallelism each tp rank's are its
  /// own ("...@tp1of2", replicated parameters too) with where the slice sits in the whole
  /// parameter, so a resume at another tp size reassembles the whole state.
  std::vector<checkpoint::OptimizerSlice> optimizer_slices(const torch::nn::Module& model) const;
  /// True when ranks hold different optimizer state (each writes its own slice file); false
  /// when it is replicated (rank 0 writes it).
  bool optimizer_sharded() const;
  /// With sharded state: whether this rank's slices are its own to write. A replica of another
  /// rank's (a data-parallel copy of a pipeline stage) writes an empty file, so a load does not
  /// find the same piece twice.
  bool writes_optimizer_slices() const;
  /// With sharded state written by this rank: whether the slice named `slice` is its to write
  /// (under expert parallelism the dense parameters are ep rank 0's).
  bool writes_optimizer_slice(const std::string& slice) const;
  checkpoint::NamedTensors external_optimizer_state(std::map<std::string, std::string>* metadata) const {
    return store_->external_optimizer_state(metadata);
  }
  void load_external_optimizer_state(const checkpoint::OptimizerStateSource& source) {
    store_->load_external_optimizer_state(source);
  }

  /// Every parameter's gradient as the optimizer gets it (reduced over data parallelism,
  /// unscaled, before clipping), whole and in fp32; under pipeline parallelism the pipeline's
  /// first rank gets every stage's. Collective. For checking a layout (colossal verify), not the
  /// hot path. A gradient held outside memory (streamed from NVMe) is left out.
  checkpoint::NamedTensors full_gradients(const torch::nn::Module& model) const;

  /// The same store with `split` (a plugin adding tp, pp or ep around a data-parallel one).
  CheckpointLayout with_split(ModelSplit split) const;
  /// Learns the names other stages and ep ranks hold (collective, once, after the split is set).
  void exchange_names(const torch::nn::Module& model);
  const ModelSplit& split() const { return split_; }

 private:
  checkpoint::NamedTensors gather_experts(checkpoint::NamedTensors state) const;
  checkpoint::NamedTensors gather_stages(checkpoint::NamedTensors state) const;

  struct Gathered {
    torch::Tensor local, full;
    parallel::ShardSpec spec;
  };
  std::shared_ptr<StateStore> store_;
  ModelSplit split_;
  std::set<std::string> elsewhere_;
  mutable std::vector<Gathered> gathered_;
};

}  // namespace colossal::booster
