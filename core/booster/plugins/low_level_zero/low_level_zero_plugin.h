#pragma once
// LowLevelZeroPlugin: ZeRO stages 1 and 2 over the world group (data parallel), or the group
// of Options::scope.
//
// Every trainable parameter is flattened, padded to a multiple of the data-parallel size N and
// split into N equal shards; rank r owns shard r. Only the owner keeps fp32 master weights and
// optimizer state for its shard (the optimizer handed to boost() is re-pointed at the shards).
//
//   stage 1: full gradients live in flat buckets (each .grad() a view, as under DDP) and are
//            all-reduced as buckets fill during backward; each rank reads its shard out of them.
//   stage 2: gradients are copied out of .grad() into a rank-major bucket as they are produced
//            (.grad() is freed at once) and reduce-scattered when the bucket is full, so only
//            the owned shard of every gradient is kept, plus a few buckets in flight.
//
// After the step the updated shards are all-gathered back into the working parameters, in
// buckets. Model-state bytes per parameter with fp32 Adam: stage 1 4 + 4 + 8/N, stage 2
// 4 + 12/N (the master is the working parameter itself when both are fp32 on one device).
//
// Gradient accumulation: either several synchronised backwards (each reduces and adds into the
// sharded gradients) or no_sync micro-batches (gradients accumulate locally in .grad(), the
// final synchronised backward reduces the sum). Parameters that get no gradient in a step
// contribute zeros (no flag needed: every bucket is still reduced in the same order on every
// rank).
//
// Options: precision (fp32|bf16|fp16, core/amp), communication_dtype (reduce in bf16/fp16 while
// masters stay fp32), bucket_mib (counted in fp32 elements), cpu_offload (masters and moments in host memory: on CUDA
// this frees device memory; on a CPU build it still keeps separate fp32 master copies, so the
// same code path runs and is tested).
#include <cstdint>
#include <string>

#include "core/amp/loss_scaler.h"
#include "core/parallel/data/data_parallel_scope.h"
#include "core/booster/plugin.h"
#include "core/common/options.h"

namespace colossal::booster {

class LowLevelZeroPlugin : public Plugin {
 public:
  struct Options {
    int stage = 2;                          // 1 or 2 (option name: zero_stage)
    int64_t bucket_bytes = 48 << 20;        // gradient and gather buckets (in fp32 elements: / 4)
    std::string precision = "fp32";         // fp32 | bf16 | fp16
    std::string communication_dtype;        // "" = the working dtype; fp32 | bf16 | fp16
    bool cpu_offload = false;
    amp::DynamicLossScaler::Options loss_scaler;  // fp16 only
    parallel::DataParallelScope scope;      // the layout's dp group, unless a hybrid plugin sets one

    void validate() const;
    template <class V>
    void visit(V& v) {
      v("zero_stage", stage, "1: optimizer state sharded; 2: gradients too");
      v.mib("bucket_mib", bucket_bytes, "gradient and gather bucket size");
      v("communication_dtype", communication_dtype, "reduce gradients in fp32|bf16|fp16 (empty: the working dtype)");
      v("cpu_offload", cpu_offload, "fp32 masters and optimizer state in host memory");
      loss_scaler.visit(v);
    }
  };

  LowLevelZeroPlugin() : LowLevelZeroPlugin(Options{}) {}
  explicit LowLevelZeroPlugin(Options options, PluginEnvironment env = {});

  std::string name() const override { return "zero" + std::to_string(options_.stage); }
  bool supports_no_sync() const override { return true; }
  bool supports_fp8() const override { return true; }
  std::string precision() const override { return options_.precision; }
  std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model, torch::optim::Optimizer& optimizer) override;
  const Options& options() const { return options_; }
  std::vector<OptionInfo> option_values() const override { return list_options(options_); }

 private:
  Options options_;
};

}  // namespace colossal::booster
