#pragma once
// The Booster: train any torch::nn::Module on one process or many with the same loop.
//
//   auto plugin = colossal::booster::make_plugin("ddp");  // registry.h: any plugin, any option
//   colossal::booster::Booster booster(plugin);
//   auto b = booster.boost(model, optimizer, scheduler);
//   for (...) {
//     b.optimizer->zero_grad();
//     auto loss = loss_fn(model->forward(x), y);
//     booster.backward(loss, *b.optimizer);
//     booster.clip_grad_norm(*b.optimizer, 1.0);
//     b.optimizer->step();
//     if (b.lr_scheduler) b.lr_scheduler->step();
//   }
//
// Gradient accumulation: run the first k-1 micro-batches inside booster.no_sync(...) (or hold a
// NoSyncGuard), the last one outside it.
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/booster/plugin.h"
#include "core/booster/registry.h"
#include "core/checkpoint/model_io.h"
#include "core/data/distributed_sampler.h"
#include "core/optim/lr_scheduler.h"
#include "core/peft/lora.h"

namespace colossal::booster {

/// The optimizer as the Booster hands it back: step() and zero_grad() go through the plugin.
class BoostedOptimizer {
 public:
  BoostedOptimizer(std::shared_ptr<torch::optim::Optimizer> inner, ModelWrapper* model)
      : inner_(std::move(inner)), model_(model) {}
  /// Returns false when the step was skipped (fp16 overflow on some rank).
  /// Also where a step ends for the communication profiler (dist/comm_profile.h).
  bool step();
  void zero_grad() { model_->hooks().zero_grad(*inner_); }
  torch::optim::Optimizer& inner() { return *inner_; }
  ModelWrapper& model_wrapper() { return *model_; }

 private:
  std::shared_ptr<torch::optim::Optimizer> inner_;
  ModelWrapper* model_;
};

struct Boosted {
  std::shared_ptr<torch::nn::Module> model;
  std::shared_ptr<BoostedOptimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> lr_scheduler;  // may be null
  c10::ScalarType compute_dtype = c10::kFloat;       // cast inputs to this (mixed precision)
  std::shared_ptr<data::DistributedSampler> sampler;  // sharded for this rank (may be null)
};

class Booster;

/// Where training stands, saved with a checkpoint (the rest — model, optimizer, scheduler, loss
/// scaler, sampler position, every rank's RNG — is taken from the Boosted objects).
struct TrainingState {
  int64_t step = 0;
  int64_t epoch = 0;
  int64_t global_batch = 0;  // samples per optimizer step over every replica (0: not recorded)
  int64_t replicas = 0;      // data-parallel replicas it was trained on (0: not recorded)
};

struct CheckpointOptions {
  int keep_last = 0;  // 0 keeps every checkpoint
  checkpoint::SaveModelOptions model;
  // Write in a background thread: save_checkpoint returns once a snapshot of the state is in
  // memory (one checkpoint's worth of extra memory, reported by last_snapshot_bytes()); the next
  // save, wait_for_checkpoint() or the Booster's destruction waits for the writing to finish.
  bool async = false;
  // Files written beside the weights in step-N/model/ (name -> bytes) before the checkpoint
  // counts as complete, so any step opens as a model: an application's config.json, tokenizer...
  std::map<std::string, std::string> model_files;
  // State the model does not hold that each rank writes itself (an application's sharded
  // embedding tables): called on every rank with the step directory, before the checkpoint
  // counts as complete (with async, before save_checkpoint returns).
  std::function<void(const std::string& step_dir)> write_rank_state;
  // Only the parameters that train go into model/ (a LoRA run: its adapters and modules_to_save;
  // the frozen base comes again from where the run loaded it). state.json says so, and
  // load_checkpoint then restores those alone.
  bool trainable_only = false;
  void validate() const;  // keep_last >= 0, the model options', plain file names
};

/// Disables gradient synchronisation until destroyed.
class NoSyncGuard {
 public:
  explicit NoSyncGuard(StepHooks& model);
  ~NoSyncGuard();
  NoSyncGuard(const NoSyncGuard&) = delete;
  NoSyncGuard& operator=(const NoSyncGuard&) = delete;

 private:
  StepHooks& model_;
  bool previous_;
};

class Booster {
 public:
  explicit Booster(std::shared_ptr<Plugin> plugin);

  const Plugin& plugin() const { return *plugin_; }

  /// Wraps model and optimizer (the optimizer must hold the model's parameters) and shards the
  /// sampler (the data loader's index source) over the plugin's data-parallel ranks. The
  /// Booster keeps the wrappers; boost each model once.
  Boosted boost(std::shared_ptr<torch::nn::Module> model,
                std::shared_ptr<torch::optim::Optimizer> optimizer,
                std::shared_ptr<optim::LRScheduler> lr_scheduler = nullptr,
                std::shared_ptr<data::DistributedSampler> sampler = nullptr);

  /// LoRA adapters on `model`, before it is boosted (as ColossalAI's booster.enable_lora):
  /// peft::enable_lora with the base frozen, so the plugin then reduces, shards and steps only
  /// the adapters. Build the optimizer after this call. Throws for a model this Booster has
  /// already boosted (its plugin has laid out the parameters it had).
  peft::LoraLayers enable_lora(torch::nn::Module& model, const peft::LoraConfig& config,
                               const std::vector<std::string>& exclude = {});

  /// loss.backward() with the plugin's gradient synchronisation around it.
  void backward(const torch::Tensor& loss, BoostedOptimizer& optimizer);

  /// One pipeline-parallel training step (hybrid plugin, pp > 1): the microbatches' `inputs`
  /// (read on the first stage) and `targets` (read on the last) run through the plugin's
  /// schedule, gradients accumulate and are synchronised over the data-parallel ranks; returns
  /// the step's mean loss on every rank. Then clip and step as usual.
  double execute_pipeline(BoostedOptimizer& optimizer, const parallel::pipeline::StageFunctions& model,
                          const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);

  /// The pipeline's forward only, for evaluation: the mean loss over the microbatches (any
  /// count), on every rank. Parameters and gradients are untouched.
  double evaluate_pipeline(BoostedOptimizer& optimizer, const parallel::pipeline::StageFunctions& model,
                           const std::vector<torch::Tensor>& inputs, const std::vector<torch::Tensor>& targets);

  /// Runs `fn` (forward + backward of a micro-batch) without gradient synchronisation.
  void no_sync(BoostedOptimizer& optimizer, const std::function<void()>& fn);
  NoSyncGuard no_sync_guard(BoostedOptimizer& optimizer);

  /// Clips the global gradient norm (across ranks where the plugin splits gradients); returns
  /// the norm before clipping.
  double clip_grad_norm(BoostedOptimizer& optimizer, double max_norm, double norm_type = 2.0);

  /// Model weights in the unsplit Hugging Face layout (safetensors, optionally sharded), written
  /// by rank 0 once every rank has arrived; all ranks return after the files are complete.
  void save_model(BoostedOptimizer& optimizer, const torch::nn::Module& model,
                  const std::string& dir, const checkpoint::SaveModelOptions& options = {});
  /// Writes <root>/step-<step>/ (model/, optimizer.safetensors, state.json, rng/rank-R.safetensors),
  /// then, once every rank has finished, points <root>/latest at it (atomically) and removes
  /// checkpoints beyond keep_last. A crash before that leaves `latest` at the previous one.
  void save_checkpoint(Boosted& boosted, const std::string& root, const TrainingState& state,
                       const CheckpointOptions& options = {});
  /// Loads <root>/latest (or `root` itself when it is a step directory) into the Boosted
  /// objects and returns the training state. RNG states are restored per rank when the world
  /// size is unchanged.
  TrainingState load_checkpoint(Boosted& boosted, const std::string& root);
  /// The training state a checkpoint (root or step directory) holds, read without loading it:
  /// what a run decides before building its schedule (the global batch to keep).
  static TrainingState read_training_state(const std::string& root);
  /// The step directory `root`/latest names when it is a complete checkpoint, else nothing: what
  /// `--load_checkpoint auto` resumes from (a restarted job continues where it last saved).
  static std::optional<std::string> latest_checkpoint(const std::string& root);
  /// The step directory load_checkpoint(root) reads (root itself, or the one root/latest names).
  static std::string step_directory(const std::string& root);
  /// Blocks until an asynchronous save has finished; rethrows its error.
  void wait_for_checkpoint();
  /// Bytes the last asynchronous save held in memory for its snapshot.
  int64_t last_snapshot_bytes() const { return last_snapshot_bytes_; }
  ~Booster();

  /// Optimizer state alone: every rank writes its slices (<dir>/optimizer/rank-R.safetensors)
  /// when the plugin shards it, rank 0 writes <dir>/optimizer.safetensors otherwise.
  void save_optimizer(BoostedOptimizer& optimizer, const torch::nn::Module& model,
                      const std::string& dir);
  /// Loads optimizer state saved under any plugin or world size.
  void load_optimizer(BoostedOptimizer& optimizer, const torch::nn::Module& model,
                      const std::string& dir);
  /// Loads weights saved under any plugin or world size; see checkpoint::load_model_state.
  checkpoint::LoadReport load_model(BoostedOptimizer& optimizer, torch::nn::Module& model,
                                    const std::string& dir,
                                    const checkpoint::LoadModelOptions& options = {});

 private:
  std::shared_ptr<Plugin> plugin_;
  std::vector<std::unique_ptr<ModelWrapper>> wrappers_;
  std::vector<const torch::nn::Module*> boosted_models_;  // enable_lora refuses these
  struct PendingSave {  // an asynchronous checkpoint being written
    std::thread thread;
    std::exception_ptr error;
  };
  std::unique_ptr<PendingSave> pending_save_;
  int64_t last_snapshot_bytes_ = 0;
};

}  // namespace colossal::booster
