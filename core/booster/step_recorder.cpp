#include "core/booster/step_recorder.h"

#include <torch/torch.h>

#include <cstdio>

#include "core/booster/plugin.h"
#include "core/common/check.h"
#include "core/common/env.h"
#include "core/common/fs.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::booster {

std::optional<StepRecorderOptions> StepRecorder::options_from_env() {
  auto dir = env_string("COLOSSAL_VERIFY_DIR");
  if (!dir) return std::nullopt;
  StepRecorderOptions o;
  o.dir = *dir;
  o.steps = env_int("COLOSSAL_VERIFY_STEPS").value_or(o.steps);
  COLOSSAL_CHECK(o.steps >= 1, "environment variable COLOSSAL_VERIFY_STEPS: expected >= 1, got ", o.steps);
  return o;
}

StepRecorder::StepRecorder(StepRecorderOptions options) : options_(std::move(options)) {
  if (dist::rank() == 0) fs::make_dirs(options_.dir);
}

namespace {

// Rank 0 writes one step's file: the gradients (none for step 0), the parameters, the loss.
void write_step(const StepRecorderOptions& o, int64_t step, const checkpoint::NamedTensors& gradients,
                const checkpoint::NamedTensors& params, const std::string& loss, double lr = 0) {
  if (dist::rank() != 0) return;
  checkpoint::NamedTensors out;
  for (auto& [name, g] : gradients) out.emplace_back("grad/" + name, g.detach().cpu());
  for (auto& [name, p] : params) out.emplace_back("param/" + name, p.detach().to(torch::kCPU, torch::kFloat32));
  std::map<std::string, std::string> metadata = {{"loss", loss},
                                                 {"step", std::to_string(step)},
                                                 {"world_size", std::to_string(dist::world_size())},
                                                 {"layout", o.layout},
                                                 {"precision", o.precision}};
  if (lr > 0) {
    char text[32];
    std::snprintf(text, sizeof text, "%.17g", lr);
    metadata["lr"] = text;
  }
  checkpoint::save_safetensors(o.dir + "/step-" + std::to_string(step) + ".safetensors", out, metadata);
}

}  // namespace

void StepRecorder::record_gradients(const CheckpointLayout& layout, const torch::nn::Module& model) {
  // Before the first optimizer step, the weights both runs start from ("step 0").
  if (!started_) write_step(options_, 0, {}, layout.model_state_to_save(model), "none");
  started_ = true;
  gradients_ = layout.full_gradients(model);
}

bool StepRecorder::finish_step(int64_t step, double local_loss, const CheckpointLayout& layout,
                               const torch::nn::Module& model, double lr) {
  auto loss = torch::tensor({local_loss}, torch::kFloat64);
  dist::all_reduce(loss, dist::world_group(), dist::ReduceOp::kAvg);
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", loss.item<double>());
  write_step(options_, step, gradients_, layout.model_state_to_save(model), text, lr);
  gradients_.clear();
  return ++recorded_ >= options_.steps;
}

}  // namespace colossal::booster
