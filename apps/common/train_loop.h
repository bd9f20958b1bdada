#pragma once
// The one training loop. An application describes its job as a TrainTask — the model under its
// plugin, the optimizer, how many samples there are, the loss of a micro-batch, the evaluation,
// what a checkpoint carries besides the Booster's state — and TrainJob::run() does everything
// else, the same way for every application:
//
//   * the Booster, gradient accumulation (no_sync over the first micro-batches) or a pipeline step;
//   * gradient clipping and the non-finite guard (a NaN/Inf loss or gradient stops every rank
//     before the optimizer step, so no NaN reaches the weights or a checkpoint);
//   * the LR schedule, checkpoints (atomic, rotated) and --load_checkpoint auto;
//   * `colossal verify` recording (the first steps' losses, gradients and parameters);
//   * --memory_trace (one step's memory by phase and module);
//   * progress on stderr, JSON lines (--log_file), TensorBoard scalars (--tensorboard) and
//     Prometheus metrics (--metrics_port);
//   * SIGINT/SIGTERM (and Ctrl-C from Python): the step finishes on every rank, a checkpoint is
//     written, the job says where and ends (exit 130 / 143; KeyboardInterrupt in Python);
//   * errors for a step that needs more samples than the data holds, and for an evaluation set
//     with nothing to score.
//
//   TrainJob job(args.loop, args.plugin);          // runtime up; colossal verify adapts the plugin
//   auto plugin = booster::make_plugin(args.plugin);
//   TrainTask task{...};                           // model, optimizer, data size, loss, evaluate
//   auto run = job.run(task, summary);
//   if (run.recorded) return;                      // colossal verify: nothing else to write
//
// In the spirit of torchtitan's TrainSpec: a training mode or an adapter changes the task, never
// the loop.
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "apps/common/app_entry.h"
#include "apps/common/metrics_endpoint.h"
#include "apps/common/verify_run.h"
#include "core/booster/booster.h"
#include "core/checkpoint/output_lock.h"
#include "core/common/options.h"
#include "core/optim/lr_scheduler.h"

namespace colossal::apps {

/// The loop's settings: the same flags and config keys in every training application. An
/// application may start them at other defaults (its TrainArgs initialises the member).
struct TrainLoopOptions {
  int64_t accumulation_steps = 1;  // micro-batches per optimizer step
  int64_t max_steps = 0;           // > 0: stop after this many steps (else the epochs decide)
  double grad_clip = 0;            // global gradient-norm clip (0: measured, not clipped)
  uint64_t seed = 42;
  std::string load_checkpoint = "auto";  // a checkpoint (root or step directory) | auto | none
  int64_t save_interval = 0;       // steps between checkpoints (0: at the end, and where the app saves by epoch)
  int64_t keep_checkpoints = 2;    // 0: all
  int64_t eval_interval = 0;       // steps between evaluations (0: at the end, and where the app evaluates by epoch;
                                   // -1: never)
  int64_t log_interval = 10;
  std::string log_file;            // JSON lines (empty: the application's default, if it has one)
  std::string tensorboard;         // TensorBoard event files in this directory (empty: none)
  std::string memory_trace;        // one step's memory by phase and module, as JSON (empty: none)
  int64_t metrics_port = 0;        // Prometheus text on GET /metrics from rank 0 (0: off)

  template <class V>
  void visit(V& v) {
    v("accumulation_steps", accumulation_steps, "micro-batches per optimizer step", at_least(1));
    v("max_steps", max_steps, "optimizer steps (0: the epochs decide)", at_least(0));
    v("grad_clip", grad_clip, "global gradient-norm clip (0: off)", at_least(0));
    v("seed", seed, "random seed (weights, data order)");
    v("load_checkpoint", load_checkpoint,
      "checkpoint to resume (root or step directory); auto: the newest in the save directory, if any (a restarted "
      "job continues); none: start over");
    v("save_interval", save_interval, "steps between checkpoints (0: at the end, and at epoch ends where the app saves "
      "by epoch)", at_least(0));
    v("keep_checkpoints", keep_checkpoints, "checkpoints kept (0: all)", at_least(0));
    v("eval_interval", eval_interval, "steps between evaluations (0: at the start, the end, and at epoch ends where "
      "the app evaluates by epoch; -1: never)", at_least(-1));
    v("log_interval", log_interval, "steps between progress lines", at_least(1));
    v("log_file", log_file, "metrics as JSON lines, appended (colossal plot draws them)");
    v("tensorboard", tensorboard, "write the same metrics as TensorBoard event files into this directory");
    v("memory_trace", memory_trace,
      "trace the second step's memory (phases, modules: peak and kept bytes) into this JSON file");
    v("metrics_port", metrics_port, "serve the job's figures as Prometheus metrics on http://0.0.0.0:PORT/metrics "
      "(rank 0; 0: off)", between(0, 65535));
  }
};

using Metrics = std::vector<std::pair<std::string, double>>;

/// What the task sees of the step it computes.
struct StepContext {
  int64_t step = 0;
  int64_t micro = 0;                        // micro-batch index within the step
  const std::vector<int64_t>& positions;    // this rank's samples (indices into the training set)
  const data::DistributedSampler& sampler;  // positions to come: a copy may look ahead (prefetching)
  c10::ScalarType compute_dtype;            // cast inputs to this (mixed precision)
  booster::Booster& booster;                // a pipeline step runs through it
  booster::BoostedOptimizer& optimizer;
  /// Adds to a per-sample count summed over the log window and the data-parallel replicas
  /// ("correct" for an accuracy). Every replica must add the same names.
  void count(const std::string& name, double value) { counts[name] += value; }
  std::map<std::string, double>& counts;
};

/// What an evaluation sees: the step, and the Booster a pipeline evaluates through.
struct EvalContext {
  int64_t step = 0;
  c10::ScalarType compute_dtype;
  booster::Booster& booster;
  booster::BoostedOptimizer& optimizer;
};

struct TrainTask {
  std::string name = "train";               // a stage's name where an app trains several ("vae")
  std::shared_ptr<booster::Plugin> plugin;
  std::shared_ptr<torch::nn::Module> model;  // built under the plugin's parallel context
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  /// The LR schedule for a run of `total_steps` steps.
  std::function<optim::LRScheduler::Options(int64_t total_steps)> schedule;

  // ---- data: the loop's sampler shuffles positions 0..train_samples-1 over the replicas
  int64_t train_samples = 0;
  int64_t micro_batch = 1;         // samples per replica per micro-batch
  bool drop_last = true;           // the sampler drops the samples that do not split over the replicas
  bool whole_batches = false;      // a batch never spans two epochs (an epoch's remainder is skipped)
  int64_t epochs = 1;              // when --max_steps is 0
  std::string batch_flag;          // how the user set the batch ("--batch_size 512"), for errors
  std::string length_flags;        // what raises the step count ("--epochs or --max_steps")
  /// Per-sample units for throughput: "tokens" with units_per_sample = sequence length.
  std::string throughput_unit = "samples";
  double units_per_sample = 1;
  double flops_per_sample = 0;     // training FLOPs of one sample; > 0 adds MFU to the log
  // Every this many epochs: evaluate and save (0: only by --eval_interval / --save_interval).
  int64_t epoch_period = 0;

  // ---- the step
  /// The mean loss of one micro-batch of this rank (the loop scales it for accumulation and runs
  /// backward through the Booster).
  std::function<torch::Tensor(StepContext&)> loss;
  /// Pipeline parallelism instead (optional): the rank's whole batch through the stages with the
  /// Booster's execute_pipeline; returns the step's mean loss. Accumulation must be 1.
  std::function<double(StepContext&)> pipeline_step;
  /// Optional: what a micro-batch's mean loss stands for (its count of target tokens). Set, the
  /// step's loss is the mean over everything the step's micro-batches on every replica stand for:
  /// each micro-batch counts in proportion to its weight, as one process holding the whole batch
  /// counts it (a replica with fewer tokens counts less). Unset, every micro-batch and replica
  /// counts equally. Not with pipeline_step.
  std::function<double(const std::vector<int64_t>& positions)> loss_weight;
  /// After the guard, before the optimizer step (rows of sparse tables updated by their own optimizer).
  std::function<void()> before_optimizer_step;
  /// Extra figures at a log line, in display order, and lists kept only in the JSON line. Called
  /// on every rank (it may communicate).
  std::function<void(Metrics& metrics, std::vector<std::pair<std::string, std::vector<double>>>& lists)> log_metrics;
  /// Metrics for the counts of a log window ("acc" from "correct"), given the window's samples.
  std::function<Metrics(const std::map<std::string, double>& counts)> count_metrics;

  // ---- evaluation (optional): collective; nullopt when nothing was scored (a warning)
  std::function<std::optional<Metrics>(const EvalContext&)> evaluate;
  int64_t eval_samples = -1;       // held-out samples (0 is an error; -1: unknown)
  std::string eval_flag;           // what gave the evaluation set ("--held_out_fraction 0.1")

  // ---- checkpoints
  std::string checkpoint_dir;      // <dir>/step-N
  std::map<std::string, std::string> model_files;  // written beside each checkpoint's weights
  bool save_trainable_only = false;  // checkpoints hold only what trains (a LoRA run's adapters)
  std::function<void(const std::string& step_dir)> save_rank_state, load_rank_state;
  std::function<void()> before_save;               // flush caches into the model's buffers
  /// After the checkpoint (if any) is loaded: the step to come, the run's last step, and the
  /// sampler where it stands (a loader running ahead starts from a copy). Collective: every rank
  /// calls it.
  std::function<void(int64_t first_step, int64_t total_steps, const data::DistributedSampler& sampler)> after_resume;
  std::string log_file;            // JSON lines when --log_file is not given (empty: none)
  std::string run;                 // tags the JSON lines and names the TensorBoard subdirectory

  // ---- the summary a caller (Python) gets: "<summary_prefix>loss", "<eval_summary_prefix><metric>"
  std::string summary_prefix;
  std::string eval_summary_prefix = "eval_";
};

/// What run() leaves for the application's own ending (its model directory, a sample).
struct TrainRun {
  std::shared_ptr<booster::Booster> booster;
  booster::Boosted boosted;
  bool recorded = false;     // colossal verify's steps are recorded: nothing else to write
  int64_t total_steps = 0;
  int64_t first_step = 1;    // > total_steps: the checkpoint was already at the end
};

class TrainJob {
 public:
  /// Brings the distributed runtime up (unless a caller, Python, already did). Under colossal
  /// verify: the reference run's `plugin` becomes one process, and nothing resumes or saves.
  TrainJob(TrainLoopOptions& loop, booster::PluginConfig& plugin);
  ~TrainJob();
  TrainJob(const TrainJob&) = delete;
  TrainJob& operator=(const TrainJob&) = delete;

  /// In colossal verify's reference run: the replicas whose samples this one process runs (its
  /// per-replica batch grows by this); 1 otherwise.
  int64_t batch_factor() const { return batch_factor_; }
  bool verifying() const { return verify_.has_value(); }
  /// One job per output: rank 0 locks `dir` for the job's life (core/checkpoint/output_lock.h), or
  /// every rank fails naming the job that holds it. Apps call it before writing anything there;
  /// run() locks the task's checkpoint directory unless a held lock covers it. Not under verify.
  void lock_output(const std::string& dir);
  const TrainLoopOptions& options() const { return loop_; }

  TrainRun run(TrainTask& task, RunSummary& summary);

 private:
  TrainLoopOptions& loop_;
  booster::PluginConfig& plugin_;
  bool own_runtime_ = false;
  std::optional<VerifyRun> verify_;
  // One job per output: held on rank 0 for the job's life (core/checkpoint/output_lock.h).
  std::vector<std::unique_ptr<checkpoint::OutputLock>> output_locks_;
  std::vector<std::string> locked_dirs_;  // on every rank
  std::unique_ptr<MetricsEndpoint> metrics_;  // rank 0, with --metrics_port
  int64_t batch_factor_ = 1;
};

}  // namespace colossal::apps
