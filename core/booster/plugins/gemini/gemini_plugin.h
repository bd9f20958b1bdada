#pragma once
// GeminiPlugin: ZeRO stage 3 with chunked parameters (data parallel over the world group).
//
// Trainable parameters are packed, in registration order, into equal-sized contiguous chunks
// (the size found by chunk_search.h, a multiple of the rank count). Each rank keeps only its
// shard of every chunk — parameters, gradients, fp32 masters and optimizer state — so model
// state per parameter is 16/N bytes with fp32 Adam. A chunk is all-gathered just before the
// first module that uses it runs, in forward and again in backward, and released after; its
// gradients are reduce-scattered as soon as all of them are produced. Accesses are recorded in
// the first step; later steps prefetch the next chunks in that order.
//
// LibTorch has no module forward hooks: the model runs every module that owns parameters through
// colossal::nn::call (core/nn/module_hooks.h). The first step keeps every chunk gathered and
// checks that each parameter's module did go through call(); a parameter used any other way is
// named in an error (check_first_step=false skips this, for models too large to gather whole).
//
// Parameters smaller than keep_gathered_below elements (biases, norms) are packed last, into
// chunks that stay gathered: one collective each would cost more than the memory they take.
//
// Placement:
//   static (default): shard_param_frac of the chunks (by order) are released after use, the rest
//                     stay gathered (no re-gather, more memory); offload_optim_frac of the chunks
//                     keep master and moments on the offload device, offload_param_frac keep
//                     their parameter shard there (offload_device: cpu — pinned host memory
//                     with asynchronous copies on a GPU — or nvme; see core/zero/chunk_manager.h).
//   auto:             gathered chunks are kept as a cache within gathered_budget_bytes; when a
//                     gather would exceed it, the chunk whose next recorded use is furthest away
//                     is released (Belady).
//
// Gradient accumulation: several backwards before a step (each reduce-scatters and adds into the
// sharded gradients). no_sync is not supported: full gradients are never kept.
#include <cstdint>
#include <string>

#include "core/amp/loss_scaler.h"
#include "core/booster/plugin.h"
#include "core/common/options.h"
#include "core/zero/chunk_search.h"

namespace colossal::booster {

class GeminiPlugin : public Plugin {
 public:
  struct Options {
    std::string precision = "fp32";      // fp32 | bf16 | fp16
    std::string placement = "static";    // static | auto
    double shard_param_frac = 1.0;       // static: chunks released after use
    double offload_optim_frac = 0.0;     // static: chunks whose optimizer state is offloaded
    double offload_param_frac = 0.0;     // static: chunks whose parameter shard is offloaded
    std::string offload_device = "cpu";  // cpu | nvme
    std::string nvme_dir;                // required for nvme
    int64_t gathered_budget_bytes = 1LL << 30;  // auto: memory for gathered chunks
    int prefetch = 2;                    // chunks gathered ahead (after the first step)
    int64_t chunk_elements = 0;          // 0: search (chunk_search below)
    int64_t keep_gathered_below = 4096;  // smaller parameters live in chunks that stay gathered
    zero::ChunkSearchOptions chunk_search;
    bool check_first_step = true;
    amp::DynamicLossScaler::Options loss_scaler;  // fp16 only

    void validate() const;
    template <class V>
    void visit(V& v) {
      v("placement", placement, "static | auto (gathered chunks cached within gathered_budget_mib)");
      v("shard_param_frac", shard_param_frac, "static: fraction of chunks released after use");
      v("offload_optim_frac", offload_optim_frac, "static: fraction of chunks whose optimizer state is offloaded");
      v("offload_param_frac", offload_param_frac, "static: fraction of chunks whose parameter shard is offloaded");
      v("offload_device", offload_device, "cpu (pinned host memory on a GPU) | nvme");
      v("nvme_dir", nvme_dir, "directory for the NVMe offload files (offload_device nvme)");
      v.mib("gathered_budget_mib", gathered_budget_bytes, "auto: memory for gathered chunks");
      v("prefetch", prefetch, "chunks gathered ahead after the first step");
      v("chunk_elements", chunk_elements, "elements per chunk (0: searched)");
      v("keep_gathered_below", keep_gathered_below, "parameters smaller than this stay gathered");
      v("check_first_step", check_first_step, "gather everything in the first step and check every use");
      loss_scaler.visit(v);
    }
  };

  GeminiPlugin() : GeminiPlugin(Options{}) {}
  explicit GeminiPlugin(Options options, PluginEnvironment env = {});

  std::string name() const override { return "gemini"; }
  bool materializes_deferred() const override { return true; }  // only this rank's shards
  std::string precision() const override { return options_.precision; }
  std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model, torch::optim::Optimizer& optimizer) override;
  const Options& options() const { return options_; }
  std::vector<OptionInfo> option_values() const override { return list_options(options_); }

 private:
  Options options_;
};

}  // namespace colossal::booster
