#include "apps/common/train_loop.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "apps/common/memory_trace.h"
#include "apps/common/resume.h"
#include "apps/common/verify_run.h"
#include "core/booster/loss_guard.h"
#include "core/booster/step_recorder.h"
#include "core/common/check.h"
#include "core/common/fault.h"
#include "core/common/fs.h"
#include "core/common/interrupt.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/tools/memory_tracer.h"

namespace colossal::apps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool distributed() { return dist::is_initialized() && dist::world_size() > 1; }

}  // namespace

TrainJob::TrainJob(TrainLoopOptions& loop, booster::PluginConfig& plugin) : loop_(loop), plugin_(plugin) {
  // Called from Python after colossal.launch(), the runtime is already up and stays up after.
  own_runtime_ = !dist::is_initialized();
  if (own_runtime_) dist::init();
  // Counting from the start, so the traced step's "at start" includes the model and its state.
  if (!loop_.memory_trace.empty()) tools::host_memory::install();
  verify_ = VerifyRun::from_env();
  if (verify_) {
    // colossal verify: record the first steps and stop; the one-process reference runs the
    // layout's global batch (apps/common/verify_run.h). No resume, no checkpoint.
    batch_factor_ = verify_->adapt(plugin_);
    loop_.load_checkpoint = "none";
    loop_.save_interval = 0;
  }
  if (loop_.metrics_port > 0 && dist::rank() == 0 && !verify_) {
    metrics_ = std::make_unique<MetricsEndpoint>(static_cast<int>(loop_.metrics_port));
    std::printf("metrics: http://0.0.0.0:%d/metrics (Prometheus text)\n", metrics_->port());
  }
}

TrainJob::~TrainJob() {
  std::fflush(stdout);
  if (own_runtime_ && dist::is_initialized()) {
    try {
      dist::shutdown();
    } catch (...) {  // a failing job is already unwinding with its own error
    }
  }
}

void TrainJob::lock_output(const std::string& checkpoint_dir) {
  if (verify_ || checkpoint_dir.empty()) return;
  // Covered by the app's own directory, or an earlier stage's: every rank keeps the list, so all
  // decide alike whether to take part in the collective below.
  for (const auto& d : locked_dirs_)
    if (checkpoint_dir == d || checkpoint_dir.rfind(d + "/", 0) == 0) return;
  locked_dirs_.push_back(checkpoint_dir);
  std::string failure;
  if (dist::rank() == 0) {
    try {
      output_locks_.push_back(checkpoint::OutputLock::acquire(checkpoint_dir, "--output/--save_dir"));
    } catch (const std::exception& e) {
      failure = error_text(e);
    }
  }
  if (distributed()) {  // every rank stops alike, not only rank 0
    auto flag = torch::tensor({failure.empty() ? 0.0f : 1.0f});
    dist::all_reduce(flag, dist::world_group(), dist::ReduceOp::kMax);
    if (flag.item<float>() > 0 && failure.empty())
      COLOSSAL_FAIL("[output] rank 0 could not lock the checkpoint directory ", checkpoint_dir,
                    " (another job uses it; rank 0's error says which)");
  }
  if (!failure.empty()) throw std::runtime_error(failure);
}

TrainRun TrainJob::run(TrainTask& t, RunSummary& summary) {
  TORCH_INTERNAL_ASSERT(t.plugin && t.model && t.optimizer && t.schedule && (t.loss || t.pipeline_step),
                        "TrainTask '", t.name, "' lacks its plugin, model, optimizer, schedule or loss");
  const int r = dist::rank();
  const auto& dims = t.plugin->dims();
  const int n = dims.dp();  // data-parallel replicas: the ranks of one share a batch
  TrainRun run;

  // ---- one job per output, then the resume: a checkpoint's global batch is kept on another number of ranks
  lock_output(t.checkpoint_dir);
  const ResumeChoice resume = verify_ ? ResumeChoice{} : resolve_resume(loop_.load_checkpoint, t.checkpoint_dir);
  int64_t accumulation = loop_.accumulation_steps;
  COLOSSAL_CHECK(!t.pipeline_step || accumulation == 1, "--accumulation_steps ", accumulation,
                 " with --pp ", dims.pp(), ": a pipeline accumulates over its microbatches; use --num_microbatches");
  if (!resume.checkpoint.empty()) {
    // On another number of replicas the checkpoint's global batch is kept (by accumulation) where
    // it can be; a batch the user changed on purpose is taken and said.
    const auto saved = booster::Booster::read_training_state(resume.checkpoint);
    const int64_t now = t.micro_batch * accumulation * n;
    const int64_t per_micro = t.micro_batch * n;
    if (saved.global_batch > 0 && saved.global_batch != now && r == 0 && (saved.replicas == n || saved.replicas == 0))
      std::printf("resume: the checkpoint trained with %ld samples per step; this run takes %ld\n", saved.global_batch,
                  now);
    if (saved.global_batch > 0 && saved.global_batch != now && saved.replicas > 0 && saved.replicas != n) {
      if (saved.global_batch % per_micro == 0 && !t.pipeline_step) {
        accumulation = saved.global_batch / per_micro;
        if (r == 0)
          std::printf("resume: the checkpoint trained with %ld samples per step on %ld replica(s); %d replica(s) x %ld "
                      "samples take %ld micro-batches per step to keep it (--accumulation_steps %ld -> %ld)\n",
                      saved.global_batch, saved.replicas, n, t.micro_batch, accumulation, loop_.accumulation_steps,
                      accumulation);
      } else if (r == 0) {
        std::fprintf(stderr, "warning: the checkpoint trained with %ld samples per step on %ld replica(s); this run "
                     "takes %ld (x%.3g): %ld is not a multiple of %d replica(s) x %ld samples, so accumulation cannot "
                     "keep it\n", saved.global_batch, saved.replicas, now,
                     static_cast<double>(now) / saved.global_batch, saved.global_batch, n, t.micro_batch);
      }
    }
  }

  // ---- the schedule
  const int64_t per_step = t.micro_batch * accumulation * n;  // samples per optimizer step
  COLOSSAL_CHECK(per_step <= t.train_samples, "[train] a step takes ", per_step, " samples (", n, " replica(s) x ",
                 t.micro_batch, " x ", accumulation, " micro-batch(es)",
                 t.batch_flag.empty() ? "" : ", from " + t.batch_flag, ") but the training data holds ",
                 t.train_samples, "; lower the batch size or give more data");
  COLOSSAL_CHECK(!t.evaluate || t.eval_samples != 0, "[train] the evaluation set holds nothing to score",
                 t.eval_flag.empty() ? "" : " (" + t.eval_flag + ")",
                 "; a score over nothing would read as a result: give more held-out data");
  const int64_t per_replica = t.drop_last ? t.train_samples / n : (t.train_samples + n - 1) / n;
  const int64_t steps_per_epoch = std::max<int64_t>(1, per_replica / (t.micro_batch * accumulation));
  const int64_t total_steps = loop_.max_steps > 0 ? loop_.max_steps : t.epochs * steps_per_epoch;
  run.total_steps = total_steps;
  auto scheduler = std::make_shared<optim::LRScheduler>(*t.optimizer, t.schedule(total_steps));
  auto sampler = std::make_shared<data::DistributedSampler>(
      data::DistributedSampler::Options{.dataset_size = t.train_samples, .seed = loop_.seed, .drop_last = t.drop_last});
  run.booster = std::make_shared<booster::Booster>(t.plugin);
  auto& booster = *run.booster;
  run.boosted = booster.boost(t.model, t.optimizer, scheduler, sampler);
  auto& b = run.boosted;
  auto& optimizer = *b.optimizer;
  const int64_t first_step = resume_from(
      booster, b, resume,
      {.total_steps = total_steps, .length_flags = t.length_flags, .load_rank_state = t.load_rank_state});
  run.first_step = first_step;
  if (t.after_resume) t.after_resume(first_step, total_steps, *sampler);

  // MFU's denominator: every rank's matrix-product rate in the compute dtype, measured now.
  double gflops = 0;
  if (t.flops_per_sample > 0) {
    auto rate = torch::tensor({measure_matmul_gflops(b.compute_dtype)}, torch::kFloat64);
    if (distributed()) dist::all_reduce(rate, dist::world_group());
    gflops = rate.item<double>();
  }
  if (r == 0) {
    std::printf("%s: plugin %s (%s), %s on %s; %d replica(s) x %ld samples x %ld micro-batch(es) = %ld samples per step; "
                "%ld steps (%.2f epochs)\n",
                t.name.c_str(), t.plugin->name().c_str(), dims.describe().c_str(), t.plugin->precision().c_str(),
                t.plugin->device().str().c_str(), n, t.micro_batch, accumulation, per_step, total_steps,
                static_cast<double>(total_steps) / steps_per_epoch);
    std::fflush(stdout);
  }

  // ---- where the figures go
  Progress progress({.enabled = r == 0,
                     .log_file = loop_.log_file.empty() ? t.log_file : loop_.log_file,
                     .total_steps = total_steps,
                     .tensorboard_dir = loop_.tensorboard.empty() || t.run.empty() ? loop_.tensorboard
                                                                                   : loop_.tensorboard + "/" + t.run,
                     .run = loop_.log_file.empty() ? "" : t.run});
  std::optional<booster::StepRecorder> recorder;
  if (verify_) recorder.emplace(verify_->recorder(*t.plugin, t.plugin->precision()));
  booster::LossGuard loss_guard(
      {.precision = t.plugin->precision(),
       .advice = loop_.save_interval > 0 || t.epoch_period > 0
                     ? "Checkpoints in " + t.checkpoint_dir + " are as they were before this step"
                     : ""});
  const bool inject_nan = fault_injected("nan_loss");

  // Time spent evaluating and saving is left out of the throughput.
  double paused = 0;
  auto report_eval = [&](int64_t step) {
    if (!t.evaluate || recorder || loop_.eval_interval < 0) return;
    const auto start = Clock::now();
    const auto metrics = t.evaluate({step, b.compute_dtype, booster, optimizer});
    paused += seconds_since(start);
    if (!metrics) {
      if (r == 0) std::fprintf(stderr, "warning: evaluation at step %ld scored nothing; no metric\n", step);
      return;
    }
    progress.event("eval", step, *metrics);
    if (metrics_) metrics_->record_eval(t.name, *metrics);
    for (const auto& [k, v] : *metrics) summary.metrics[t.eval_summary_prefix + k] = v;
  };
  int64_t last_saved = first_step - 1;
  auto save = [&](int64_t step, const Metrics& extra = {}) {
    const auto start = Clock::now();
    if (t.before_save) t.before_save();
    booster::CheckpointOptions options{.keep_last = static_cast<int>(loop_.keep_checkpoints),
                                       .model_files = t.model_files,
                                       .write_rank_state = t.save_rank_state,
                                       .trainable_only = t.save_trainable_only};
    booster.save_checkpoint(b, t.checkpoint_dir,
                            {.step = step, .epoch = sampler->epoch(), .global_batch = per_step, .replicas = n}, options);
    progress.event("checkpoint", step, extra, t.checkpoint_dir + "/step-" + std::to_string(step));
    if (metrics_) metrics_->record_checkpoint(t.name, step);
    last_saved = step;
    paused += seconds_since(start);
  };
  auto draw = [&] {
    if (!t.whole_batches) return sampler->next_across_epochs(t.micro_batch);
    auto positions = sampler->next(t.micro_batch);
    if (static_cast<int64_t>(positions.size()) < t.micro_batch) {  // the epoch ends: start the next
      sampler->set_epoch(sampler->epoch() + 1);
      positions = sampler->next(t.micro_batch);
    }
    return positions;
  };

  const auto t0 = Clock::now();
  if (first_step == 1) report_eval(0);
  auto window_start = Clock::now();
  paused = 0;  // the window starts after the first evaluation
  double window_loss = 0;
  int64_t window_steps = 0;
  bool window_skipped = false;
  std::map<std::string, double> window_counts;
  StepMemoryTrace trace(loop_.memory_trace, first_step, total_steps);
  for (int64_t step = first_step; step <= total_steps; ++step) {
    trace.begin(step);
    optimizer.zero_grad();
    double step_loss = 0;
    std::map<std::string, double> counts;
    if (t.pipeline_step) {
      const auto positions = draw();
      StepContext ctx{step, 0, positions, *sampler, b.compute_dtype, booster, optimizer, counts};
      trace.phase("pipeline");
      step_loss = t.pipeline_step(ctx);
      if (inject_nan && step == 2) step_loss = std::numeric_limits<double>::quiet_NaN();
    } else {
      // Each micro-batch's share of the step: equal, or (loss_weight) its weight over the whole
      // step's on every replica, times the replicas (their gradients are averaged).
      std::vector<std::vector<int64_t>> drawn;
      std::vector<double> share(static_cast<size_t>(accumulation), 1.0 / static_cast<double>(accumulation));
      if (t.loss_weight) {
        double mine = 0;
        for (int64_t micro = 0; micro < accumulation; ++micro) {
          drawn.push_back(draw());
          share[static_cast<size_t>(micro)] = t.loss_weight(drawn.back());
          mine += share[static_cast<size_t>(micro)];
        }
        auto total = torch::tensor({mine}, torch::kFloat64);
        const auto group = dims.group(dist::Axis::kDp);
        const int64_t replicas = group.is_member() ? group.size() : 1;
        if (replicas > 1) dist::all_reduce(total, group);
        const double all = total.item<double>();
        for (auto& w : share) w = all > 0 ? w * static_cast<double>(replicas) / all : 0.0;
      }
      for (int64_t micro = 0; micro < accumulation; ++micro) {
        const auto positions = drawn.empty() ? draw() : drawn[static_cast<size_t>(micro)];
        StepContext ctx{step, micro, positions, *sampler, b.compute_dtype, booster, optimizer, counts};
        auto run_micro = [&] {
          trace.phase("forward");
          auto loss = t.loss(ctx) * share[static_cast<size_t>(micro)];
          if (inject_nan && step == 2) loss = loss * std::numeric_limits<double>::quiet_NaN();
          trace.phase("backward");
          booster.backward(loss, optimizer);
          step_loss += loss.item<double>();
        };
        if (micro + 1 < accumulation) booster.no_sync(optimizer, run_micro);
        else run_micro();
      }
    }
    if (recorder) recorder->record_gradients(optimizer.model_wrapper().checkpoint(), *t.model);
    // A NaN/Inf loss or gradient stops every rank here, before the weights (fp16: the scaler skips).
    // The same exchange carries a stop asked of any rank (a signal, Ctrl-C in Python), so every
    // rank finishes this step and stops after it.
    const double norm =
        loss_guard.clip_and_check(booster, optimizer, loop_.grad_clip, step_loss, step, interrupt_requested());
    if (t.before_optimizer_step) t.before_optimizer_step();
    const double lr = b.lr_scheduler->lr();
    trace.phase("optimizer");
    const bool stepped = optimizer.step();
    b.lr_scheduler->step();
    trace.end(step, [&] { return optimizer.model_wrapper().hooks().memory_report(*t.model, optimizer.inner()).total(); });
    window_loss += step_loss;
    ++window_steps;
    window_skipped = window_skipped || !stepped;
    for (const auto& [k, v] : counts) window_counts[k] += v;

    if (step % loop_.log_interval == 0 || step == total_steps) {
      auto l = torch::tensor({window_loss / window_steps}, torch::kFloat64);
      if (distributed()) dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
      Metrics m = {{"loss", l.item<double>()}};
      if (t.count_metrics) {
        std::vector<double> values;
        for (const auto& [k, v] : window_counts) values.push_back(v);
        auto packed = torch::tensor(values, torch::kFloat64);
        const auto group = dims.group(dist::Axis::kDp);
        if (group.is_member() && group.size() > 1 && packed.numel() > 0) dist::all_reduce(packed, group);
        size_t i = 0;
        for (auto& [k, v] : window_counts) v = packed[static_cast<int64_t>(i++)].item<double>();
        for (const auto& [k, v] : t.count_metrics(window_counts)) {
          m.push_back({k, v});
          summary.metrics[t.summary_prefix + k] = v;
        }
      }
      const double secs = std::max(1e-9, seconds_since(window_start) - paused);
      const double samples_s = static_cast<double>(window_steps * per_step) / secs;
      m.push_back({"lr", lr});
      m.push_back({"grad_norm", norm});
      m.push_back({t.throughput_unit + "/s", samples_s * t.units_per_sample});
      if (gflops > 0) m.push_back({"mfu", samples_s * t.flops_per_sample / 1e9 / gflops});
      m.push_back({"mem_gib", resident_gib()});
      if (window_skipped) m.push_back({"skipped", 1});
      std::vector<std::pair<std::string, std::vector<double>>> lists;
      if (t.log_metrics) t.log_metrics(m, lists);
      progress.step(step, m, lists);
      if (metrics_) metrics_->record_step(t.name, step, total_steps, m);
      summary.metrics[t.summary_prefix + "loss"] = m.front().second;
      summary.metrics[t.summary_prefix + "steps"] = static_cast<double>(step);
      window_loss = 0;
      window_steps = 0;
      window_skipped = false;
      window_counts.clear();
      window_start = Clock::now();
      paused = 0;
    }
    if (recorder) {
      if (recorder->finish_step(step, step_loss, optimizer.model_wrapper().checkpoint(), *t.model, lr)) break;
    } else if (step != total_steps) {
      const bool epoch_end = t.epoch_period > 0 && step % (steps_per_epoch * t.epoch_period) == 0;
      if ((loop_.eval_interval > 0 && step % loop_.eval_interval == 0) || epoch_end) report_eval(step);
      if ((loop_.save_interval > 0 && step % loop_.save_interval == 0) || epoch_end) save(step);
    }
    if (step != total_steps && loss_guard.stop_requested()) {
      // Every rank finished this step; leave a checkpoint to resume from.
      std::string where;
      if (!recorder) {
        if (last_saved != step) save(step);
        where = "; checkpoint " + t.checkpoint_dir + "/step-" + std::to_string(step) +
                " (the same command resumes from it: --load_checkpoint auto)";
      }
      std::fflush(stdout);
      throw Interrupted("stopped after step " + std::to_string(step) + " of " + std::to_string(total_steps) + where);
    }
  }
  if (recorder) {
    if (r == 0)
      std::printf("recorded %ld step(s) for colossal verify in %s\n", static_cast<long>(recorder->recorded()),
                  recorder->options().dir.c_str());
    std::fflush(stdout);
    run.recorded = true;
    return run;
  }
  if (first_step <= total_steps) {
    report_eval(total_steps);
    save(total_steps, {{"seconds", seconds_since(t0)}});
  }
  std::fflush(stdout);
  return run;
}

}  // namespace colossal::apps
