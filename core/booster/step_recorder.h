#pragma once
// What `colossal verify` compares, recorded by the training run itself: for each of its first
// steps the loss (the mean over the job), every gradient (whole, as the optimizer gets it, before
// clipping) and every parameter after the optimizer step. Rank 0 writes DIR/step-K.safetensors
// ("grad/<name>", "param/<name>"; the loss, layout and precision in the metadata), and step-0
// with the weights the run starts from (loss "none"). Recording is
// collective: every rank calls the same methods at the same points.
//
// A training app makes one when the environment asks (colossal verify sets it):
//   COLOSSAL_VERIFY_DIR    where the steps go
//   COLOSSAL_VERIFY_STEPS  how many steps to record (then the app stops), default 3
#include <torch/nn/module.h>

#include <cstdint>
#include <optional>
#include <string>

#include "core/checkpoint/safetensors.h"

namespace colossal::booster {

class CheckpointLayout;

struct StepRecorderOptions {
  std::string dir;
  int64_t steps = 3;
  std::string layout;     // what the run was (for the report): "hybrid (pp 1 x dp 1 x sp 2 x tp 1)"
  std::string precision;  // fp32 | bf16 | fp16: the report's default tolerances follow it
};

class StepRecorder {
 public:
  /// From COLOSSAL_VERIFY_DIR / COLOSSAL_VERIFY_STEPS; nullopt when the directory is not set.
  static std::optional<StepRecorderOptions> options_from_env();

  explicit StepRecorder(StepRecorderOptions options);

  /// After backward (gradients reduced), before clipping.
  void record_gradients(const CheckpointLayout& layout, const torch::nn::Module& model);
  /// After the optimizer step: `local_loss` is this rank's loss of the step (averaged over the
  /// job here), `lr` the step's learning rate (0: unknown; the report then holds every parameter
  /// strictly). Writes the step's file; true once the last step to record is written.
  bool finish_step(int64_t step, double local_loss, const CheckpointLayout& layout, const torch::nn::Module& model,
                   double lr = 0);

  const StepRecorderOptions& options() const { return options_; }
  int64_t recorded() const { return recorded_; }

 private:
  StepRecorderOptions options_;
  int64_t recorded_ = 0;
  bool started_ = false;
  checkpoint::NamedTensors gradients_;
};

}  // namespace colossal::booster
