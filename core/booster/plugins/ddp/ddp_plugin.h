#pragma once
// DDPPlugin: data parallelism over the world group (or the group of Options::scope).
//
// * Parameters and buffers are broadcast from rank 0 when the model is wrapped.
// * Gradients live in flat buckets (default 25 MB), grouped in reverse registration order (the
//   order backward produces them); each parameter's .grad() is a view into its bucket, so no
//   gradient is ever copied.
// * A hook on each parameter's gradient accumulator counts ready gradients; a full bucket is
//   all-reduced (averaged) asynchronously at once, so communication overlaps the rest of
//   backward. Buckets are launched in index order on every rank, so collectives always match.
// * no_sync: backward accumulates into the buckets without communication; the next synchronised
//   backward all-reduces the sum.
// * Mixed precision (bf16/fp16): working parameters, gradients and communication in the low
//   precision, fp32 masters in the optimizer, fp16 loss scaling (core/amp).
// * A parameter that got no gradient: with find_unused_parameters its bucket is reduced at the
//   end of backward (it contributes its current gradient, zero after zero_grad); without it, an
//   error names the parameters.
#include <cstdint>

#include "core/amp/loss_scaler.h"
#include "core/parallel/data/data_parallel_scope.h"
#include "core/booster/plugin.h"
#include "core/common/options.h"

namespace colossal::booster {

class DDPPlugin : public Plugin {
 public:
  struct Options {
    int64_t bucket_bytes = 25 << 20;     // gradient bucket size
    bool find_unused_parameters = false; // allow parameters without a gradient in a step
    bool broadcast_buffers = true;       // broadcast buffers from rank 0 at wrap time
    std::string precision = "fp32";      // fp32 | bf16 | fp16 (core/amp/precision.h)
    amp::DynamicLossScaler::Options loss_scaler;  // fp16 only
    parallel::DataParallelScope scope;   // the layout's dp group, unless a hybrid plugin sets one

    void validate() const;
    /// The options a config file or a flag can set (precision and scope come from elsewhere).
    template <class V>
    void visit(V& v) {
      v.mib("bucket_mib", bucket_bytes, "gradient bucket size");
      v("find_unused_parameters", find_unused_parameters, "allow parameters that get no gradient in a step");
      v("broadcast_buffers", broadcast_buffers, "broadcast buffers from rank 0 when wrapping");
      loss_scaler.visit(v);
    }
  };

  DDPPlugin() : DDPPlugin(Options{}) {}
  explicit DDPPlugin(Options options, PluginEnvironment env = {});

  std::string name() const override { return "ddp"; }
  bool supports_no_sync() const override { return true; }
  bool supports_fp8() const override { return true; }
  std::string precision() const override { return options_.precision; }
  std::unique_ptr<ModelWrapper> wrap_model(torch::nn::Module& model,
                                           torch::optim::Optimizer& optimizer) override;

  const Options& options() const { return options_; }
  std::vector<OptionInfo> option_values() const override { return list_options(options_); }

 private:
  Options options_;
};

}  // namespace colossal::booster
