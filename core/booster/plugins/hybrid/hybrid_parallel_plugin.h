#pragma once
// HybridParallelPlugin: pipeline x tensor x sequence x expert x data parallelism over the job's
// layout (dist::ParallelDims).
//
// Pipeline (pp > 1): the model is built with parallel_context(), whose pipeline layout says
// which layers this rank's stage holds (pp_schedule, num_model_chunks); each training step is
// Booster::execute_pipeline, which runs the schedule over the microbatches and reduces every
// parameter's gradient over the data-parallel ranks once its last microbatch is through.
// Gradient norms are summed over the stages.
//
// The model is built with parallel_context() (the layout's tp and sp groups) and applies its own
// parallel plan; the plugin then runs DDP (zero_stage 0) or ZeRO-1/2 over the data-parallel ranks:
//   none, split_gather    the dp group (split_gather shards the sequence over the tp group)
//   all_to_all, ring_attn the dp x sp group, gradients summed over sp and averaged over dp
// Gradient clipping sums every tensor-parallel slice once; checkpoints hold whole tensors
// (gathered on save, each rank's slice copied back on load), so they load at any tp size and
// into a single process. Optimizer state is saved per tp rank, stage and expert share with where
// each piece sits in the whole parameter, so it resumes at another layout too. The plugin builds
// DDP's or ZeRO's wrapper and gives its checkpoint layout this layout's split
// (checkpoint_layout.h); it forwards nothing by hand.
//
// The layout is validated when it is built (ParallelDims); whether a model can be split that way
// is the model's own rule (e.g. llama::check_parallel), checked before any group is created.
#include <optional>

#include "core/amp/loss_scaler.h"
#include "core/booster/plugin.h"
#include "core/common/options.h"
#include "core/parallel/context.h"

namespace colossal::booster {

class HybridParallelPlugin : public Plugin {
 public:
  struct Options {
    int zero_stage = 0;              // 0: DDP; 1, 2: ZeRO over the data-parallel ranks
    std::string precision = "fp32";  // fp32 | bf16 | fp16
    int64_t bucket_bytes = 0;        // 0: the data-parallel wrapper's own (DDP 25 MiB, ZeRO 48 MiB)
    std::string communication_dtype; // ZeRO: reduce gradients in this dtype ("" = the working dtype)
    bool cpu_offload = false;        // ZeRO: fp32 masters and optimizer state in host memory
    bool find_unused_parameters = false;  // DDP: allow parameters that get no gradient in a step
    bool broadcast_buffers = true;        // DDP: broadcast buffers from rank 0 when wrapping
    amp::DynamicLossScaler::Options loss_scaler;  // fp16 only
    std::string pp_schedule = "1f1b";  // gpipe | 1f1b | interleaved | zbh1 | zbv
    int num_model_chunks = 1;          // interleaved: >= 2; zbv: 2
    int num_microbatches = 0;          // per step and data-parallel rank (0: pp x num_model_chunks)
    int microbatch_size = 0;           // samples per microbatch, instead of num_microbatches (0: unused)
    std::string pp_balance = "cost";   // layers per stage: cost (embedding and head counted) | count
    void validate() const;
    template <class V>
    void visit(V& v) {
      // The data-parallel options under the names and defaults they have under ddp and zero1/zero2.
      v("zero_stage", zero_stage, "0: DDP over the data-parallel ranks; 1, 2: ZeRO-1/2", between(0, 2));
      v.mib("bucket_mib", bucket_bytes, "gradient bucket size (0: DDP's 25 MiB at zero_stage 0, ZeRO's 48 MiB at 1, 2)");
      v("communication_dtype", communication_dtype,
        "zero_stage 1, 2: reduce gradients in fp32|bf16|fp16 (empty: the working dtype)");
      v("cpu_offload", cpu_offload, "zero_stage 1, 2: fp32 masters and optimizer state in host memory");
      v("find_unused_parameters", find_unused_parameters,
        "zero_stage 0: allow parameters that get no gradient in a step (ZeRO always does)");
      v("broadcast_buffers", broadcast_buffers, "zero_stage 0: broadcast buffers from rank 0 when wrapping");
      loss_scaler.visit(v);
      v("pp_schedule", pp_schedule, "pp > 1: gpipe | 1f1b | interleaved | zbh1 | zbv");
      v("num_model_chunks", num_model_chunks, "pp > 1: model chunks per stage (interleaved >= 2, zbv 2)");
      v("num_microbatches", num_microbatches, "pp > 1: microbatches per step (0: pp x num_model_chunks)");
      v("microbatch_size", microbatch_size, "pp > 1: samples per microbatch (instead of num_microbatches)");
      v("pp_balance", pp_balance, "pp > 1: layers per stage by cost (embedding and head counted) or count");
    }
    /// The schedule's options for `pp` stages (num_microbatches resolved).
    parallel::pipeline::ScheduleOptions schedule(int pp) const;
  };

  /// `env.dims` is the layout (null: pure data parallelism over the world).
  explicit HybridParallelPlugin(Options options, PluginEnvironment env = {});

  /// The groups a model is built with, and its pipeline stage (created on the first call:
  /// collective, every rank calls it).
  parallel::ParallelContext parallel_context() override;

  std::string name() const override { return "hybrid"; }
  bool supports_no_sync() const override { return true; }
  bool supports_fp8() const override { return true; }
  std::string precision() const override { return options_.precision; }
  std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model, torch::optim::Optimizer& optimizer) override;

  const Options& options() const { return options_; }
  std::vector<OptionInfo> option_values() const override { return list_options(options_); }

 private:
  Options options_;
  std::optional<parallel::ParallelContext> context_;
};

}  // namespace colossal::booster
