#pragma once
// HybridParallelPlugin: tensor x sequence x data parallelism on one ProcessGroupMesh.
//
// The mesh is (dp, sp, tp), tp innermost so tensor-parallel peers are neighbours (the pipeline
// axis will go in front). The model is built with parallel_context() (its tp and sp groups) and
// applies its own parallel plan; the plugin then runs DDP (zero_stage 0) or ZeRO-1/2 over the
// data-parallel ranks:
//   none, split_gather   the dp group (split_gather shards the sequence over the tp group)
//   all_to_all, ring_attn the dp x sp group, gradients summed over sp and averaged over dp
// Gradient clipping sums every tensor-parallel slice once; checkpoints hold whole tensors
// (gathered on save, each rank's slice copied back on load), so they load at any tp size and
// into a single process. Optimizer state under tp > 1 is saved per rank and resumes with the
// same layout.
//
// Every size is checked against the world in the constructor and against the model
// (check_model) before any group is created, with messages that say what does not divide what.
#include <optional>

#include "core/booster/plugin.h"
#include "core/dist/mesh.h"
#include "core/parallel/context.h"

namespace colossal::booster {

class HybridParallelPlugin : public Plugin {
 public:
  struct Options {
    int tp = 1;                      // tensor-parallel size
    int sp = 1;                      // sequence-parallel size (split_gather: 1 or tp)
    std::string sp_mode = "none";    // none | split_gather | all_to_all | ring_attn
    int zero_stage = 0;              // 0: DDP; 1, 2: ZeRO over the data-parallel ranks
    std::string precision = "fp32";  // fp32 | bf16 | fp16
    int64_t bucket_bytes = 25 << 20; // DDP bucket (ZeRO: this many bytes of fp32 elements)
    void validate() const;
  };

  /// The sizes a model must accept (what check_model compares).
  struct ModelLimits {
    int64_t attention_heads = 0, kv_heads = 0, intermediate_size = 0, seq_len = 0;
  };

  /// Checks the options and that they divide `world_size` (dist::world_size() when 0).
  explicit HybridParallelPlugin(Options options, int world_size = 0);

  /// Throws when the model cannot be split this way (heads by tp, heads per tp rank by sp under
  /// all_to_all, kv heads, MLP width, sequence length by the mode's split). No communication.
  void check_model(const ModelLimits& limits) const;

  /// The groups a model is built with. Creates the mesh on the first call (collective: every
  /// rank calls it).
  const parallel::ParallelContext& parallel_context();

  std::string name() const override { return "hybrid"; }
  bool supports_no_sync() const override { return true; }
  std::string precision() const override { return options_.precision; }
  std::pair<int, int> data_parallel_rank_and_size() const override;
  std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model, torch::optim::Optimizer& optimizer) override;

  const Options& options() const { return options_; }
  int dp_size() const { return world_ / (options_.tp * sp_axis()); }
  /// "tp 2 x sp 2 (ring_attn) x dp 1, ZeRO-2"
  std::string describe() const;

 private:
  int sp_axis() const;  // the size of the mesh's own sp axis (1 for none and split_gather)

  Options options_;
  int world_ = 1;
  parallel::SequenceParallelMode mode_ = parallel::SequenceParallelMode::kNone;
  std::optional<dist::ProcessGroupMesh> mesh_;
  parallel::ParallelContext context_;
  dist::Group data_group_;  // what gradients are reduced over
};

}  // namespace colossal::booster
