// train_recsys: train a recommender (DLRM or DeepFM) on click-through data with a Booster plugin,
// on one process or many; held-out AUC and log loss every epoch; checkpoints that resume.
//
// With no arguments it trains DLRM on MovieLens (dslabs' copy, fetched by scripts/setup.sh:
// ratings of 4 or more are clicks, the latest 20% held out) and writes out/recsys/log.jsonl,
// which `colossal plot` draws:
//   build/apps/colossal run --nproc_per_node 2 -- build/apps/train_recsys
//   build/apps/train_recsys --model deepfm --plugin zero2 --epochs 8
//   build/apps/train_recsys --data synthetic --synthetic_table_size 1000000
#include "apps/recsys/train_recsys.h"

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "apps/common/resume.h"
#include "apps/recsys/train_args.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/fs.h"
#include "core/common/interrupt.h"
#include "core/common/progress.h"
#include "core/data/distributed_sampler.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/optim/lr_scheduler.h"
#include "recsys/data/movielens.h"
#include "recsys/data/synthetic.h"
#include "recsys/metrics.h"
#include "recsys/models/rec_model.h"

namespace dist = colossal::dist;
namespace booster = colossal::booster;
using colossal::recsys_app::TrainArgs;
using namespace colossal::recsys;

namespace {

CtrSplit load_data(const TrainArgs& a) {
  if (a.data == "movielens") return load_movielens({.r_data = a.r_data, .held_out_fraction = a.held_out_fraction});
  SyntheticOptions o{.samples = a.synthetic_samples, .fields = a.synthetic_fields,
                     .table_size = a.synthetic_table_size, .zipf = a.synthetic_zipf, .seed = a.seed};
  const auto held_out = std::max<int64_t>(1, static_cast<int64_t>(a.held_out_fraction * o.samples));
  return {make_synthetic(o, 0, o.samples - held_out), make_synthetic(o, o.samples - held_out, held_out)};
}

// Table memory a rank may use for sharded tables: --embedding_memory_gib, or the available
// memory's share among this machine's ranks; the smallest over the ranks, so every rank plans
// with the same budget.
double table_memory_per_rank(const TrainArgs& a, const dist::Group& group) {
  if (a.sharding == "none") return 0;
  double gib = a.embedding_memory_gib;
  if (gib == 0) gib = 0.8 * colossal::available_memory_gib() / std::max(1, dist::environment().local_world_size);
  auto t = torch::tensor({gib}, torch::kFloat64);
  if (group.is_member() && group.size() > 1) dist::all_reduce(t, group, dist::ReduceOp::kMin);
  return t.item<double>() * (1 << 30);
}

// Each rank's shards of the sharded tables: step-N/embeddings/rank-R.safetensors.
void save_sharded_tables(RecModel& model, const std::string& step_dir) {
  colossal::checkpoint::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
  for (auto& tables : model.embedding_tables())
    if (tables->sharded) tables->sharded->collect(tensors, metadata);
  colossal::fs::make_dirs(step_dir + "/embeddings");
  colossal::checkpoint::save_safetensors(step_dir + "/embeddings/rank-" + std::to_string(dist::rank()) + ".safetensors",
                                         tensors, metadata);
}

void load_sharded_tables(RecModel& model, const std::string& step_dir) {
  bool any = false;
  for (auto& tables : model.embedding_tables()) any = any || tables->sharded;
  const std::string dir = step_dir + "/embeddings";
  if (!any) {
    COLOSSAL_CHECK(!colossal::fs::is_directory(dir), "checkpoint '", step_dir, "' holds sharded embedding tables (",
                   dir, "): resume it with --sharding auto, table, row or column");
    return;
  }
  COLOSSAL_CHECK(colossal::fs::is_directory(dir), "checkpoint '", step_dir, "' holds no sharded embedding tables (no ",
                 dir, "; it was written with --sharding none): resume it with --sharding none");
  std::vector<std::shared_ptr<colossal::checkpoint::SafetensorsFile>> files;
  for (const auto& name : colossal::fs::list_dir(dir))
    if (name.size() > 12 && name.substr(name.size() - 12) == ".safetensors")
      files.push_back(colossal::checkpoint::SafetensorsFile::open(dir + "/" + name));
  for (auto& tables : model.embedding_tables())
    if (tables->sharded) tables->sharded->load(files);
}

struct Evaluation {
  double auc = 0, log_loss = 0;
};

// Every rank scores the whole held-out split (the dense parts are replicated under the
// data-parallel plugins), so every rank reports the same figures without communicating.
Evaluation evaluate(RecModel& model, const CtrDataset& held_out) {
  torch::NoGradGuard no_grad;
  model.eval();
  std::vector<torch::Tensor> logits;
  const int64_t chunk = 4096;
  for (int64_t begin = 0; begin < held_out.size(); begin += chunk) {
    std::vector<int64_t> rows;
    for (int64_t i = begin; i < std::min(held_out.size(), begin + chunk); ++i) rows.push_back(i);
    logits.push_back(model.forward(held_out.batch(rows)));
  }
  model.train();
  auto all = torch::cat(logits);
  return {auc(all, held_out.labels), log_loss(all, held_out.labels)};
}

void train(TrainArgs& a, colossal::apps::RunSummary& summary) {
  const bool own_runtime = !dist::is_initialized();
  if (own_runtime) dist::init();
  const int r = dist::rank();
  const bool sharded = a.sharding != "none";
  COLOSSAL_CHECK((a.cache_ratio == 0 && !sharded) || a.plugin.precision == "fp32", "--cache_ratio or --sharding with "
                 "--precision ", a.plugin.precision, ": the cached or sharded tables and their row-wise optimizer are "
                 "fp32 (use --precision fp32)");
  COLOSSAL_CHECK(a.plugin.name != "gemini" && a.plugin.name != "zero3", "--plugin ", a.plugin.name,
                 ": the recommenders' dense parts run under ddp, zero1 or zero2 (their embedding tables are "
                 "sharded with --sharding instead)");
  auto plugin = booster::make_plugin(a.plugin);
  const int n = plugin->dims().dp();
  COLOSSAL_CHECK(a.batch_size % n == 0, "--batch_size ", a.batch_size, " does not split over ", n,
                 " data-parallel ranks");
  const int64_t per_rank = a.batch_size / n;
  colossal::fs::make_dirs(a.save_dir);
  if (a.log_file.empty()) a.log_file = a.save_dir + "/log.jsonl";

  auto t0 = std::chrono::steady_clock::now();
  const CtrSplit data = load_data(a);
  if (r == 0) {
    std::printf("data: %s, %ld training and %ld held-out samples (%.1f%% and %.1f%% clicks); %zu sparse fields "
                "(tables:", a.data.c_str(), data.train.size(), data.held_out.size(), 100 * data.train.positive_rate(),
                100 * data.held_out.positive_rate(), data.train.fields.size());
    for (const auto& f : data.train.fields) std::printf(" %s %ld", f.name.c_str(), f.table_size);
    std::printf("), %zu dense (%.1f s to load)\n", data.train.dense_names.size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }

  const auto dp_group = plugin->dims().group(dist::Axis::kDp);
  torch::manual_seed(a.seed);
  RecModelOptions mo{.kind = a.model, .dense_features = static_cast<int64_t>(data.train.dense_names.size()),
                     .table_sizes = data.train.table_sizes(), .embedding_dim = a.embedding_dim,
                     .bottom_mlp = a.bottom_mlp, .top_mlp = a.top_mlp, .pooling = a.pooling,
                     .cache_ratio = a.cache_ratio, .sharding = a.sharding, .group = &dp_group,
                     .memory_per_rank = table_memory_per_rank(a, dp_group)};
  mo.cache.eviction = a.eviction;
  mo.cache.optimizer.kind = a.sparse_optimizer;
  mo.cache.optimizer.lr = a.sparse_lr;
  mo.cache.seed = a.seed;
  mo.cache.min_slots = a.cache_min_slots;
  mo.cache.offload_dir = a.offload_dir;
  auto model = make_rec_model(mo);
  const bool cached = a.cache_ratio > 0;
  const bool sparse_tables = cached || sharded;  // updated by the row-wise optimizer, not the model's
  // Frequency-aware warm-up: each cached table starts holding its most frequent training ids.
  if (cached) {
    std::vector<std::vector<int64_t>> counts;
    for (const auto& field : data.train.fields) {
      counts.emplace_back(field.table_size, 0);
      for (int64_t id : field.ids) ++counts.back()[id];
    }
    for (auto& tables : model->embedding_tables()) tables->warm_up(counts);
  }
  if (sharded && r == 0)
    for (auto& tables : model->embedding_tables())
      std::printf("%s", describe_plan(tables->sharded->plan(), tables->sharded->options().name).c_str());
  auto flush_tables = [&] {
    for (auto& tables : model->embedding_tables()) tables->flush();
  };
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  const int64_t steps_per_epoch = std::max<int64_t>(1, data.train.size() / a.batch_size);
  const int64_t total_steps = a.max_steps > 0 ? a.max_steps : a.epochs * steps_per_epoch;
  auto optimizer = std::make_shared<torch::optim::AdamW>(
      model->parameters(), torch::optim::AdamWOptions(a.lr).weight_decay(a.weight_decay));
  auto scheduler = std::make_shared<colossal::optim::LRScheduler>(
      *optimizer, colossal::optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = total_steps / 20,
                                                        .total_steps = total_steps, .min_lr_ratio = 0.1});
  auto sampler = std::make_shared<colossal::data::DistributedSampler>(colossal::data::DistributedSampler::Options{
      .dataset_size = data.train.size(), .seed = a.seed, .drop_last = true});
  booster::Booster booster(plugin);
  auto b = booster.boost(model, optimizer, scheduler, sampler);
  if (r == 0)
    std::printf("model: %s, %.2fM parameters, embedding dim %ld (%s pooling); %s, %d rank(s), batch %ld (%ld per "
                "rank), %ld steps\n", a.model.c_str(), parameters / 1e6, a.embedding_dim, a.pooling.c_str(),
                a.plugin.describe().c_str(), dist::world_size(), a.batch_size, per_rank, total_steps);
  const int64_t first_step = colossal::apps::resume_training(
      booster, b, {.flag = a.load_checkpoint, .save_dir = a.save_dir + "/checkpoints", .total_steps = total_steps,
                   .length_flags = "--epochs or --max_steps",
                   .load_rank_state = [&](const std::string& dir) { load_sharded_tables(*model, dir); }});
  if (first_step > 1)  // the cached tables' buffers were loaded: their caches start over (sharded: load() did)
    for (auto& tables : model->embedding_tables()) tables->invalidate();

  colossal::Progress progress({.enabled = r == 0, .log_file = a.log_file, .total_steps = total_steps});
  auto report_eval = [&](int64_t step) {
    const auto e = evaluate(*model, data.held_out);
    progress.event("eval", step, {{"auc", e.auc}, {"log_loss", e.log_loss}});
    summary.metrics["eval_auc"] = e.auc;
    summary.metrics["eval_log_loss"] = e.log_loss;
  };
  auto save = [&](int64_t step) {
    flush_tables();  // the cached tables' buffers hold every row's latest values
    booster::CheckpointOptions options{.keep_last = static_cast<int>(a.keep_checkpoints)};
    if (sharded) options.write_rank_state = [&](const std::string& dir) { save_sharded_tables(*model, dir); };
    booster.save_checkpoint(b, a.save_dir + "/checkpoints", {.step = step, .epoch = sampler->epoch()}, options);
    progress.event("checkpoint", step, {}, a.save_dir + "/checkpoints/step-" + std::to_string(step));
  };
  if (first_step == 1) report_eval(0);
  auto window_start = std::chrono::steady_clock::now();
  double window_loss = 0;
  int64_t window_steps = 0;
  for (int64_t step = first_step; step <= total_steps; ++step) {
    colossal::throw_if_interrupted("training step " + std::to_string(step));
    const auto batch = data.train.batch(sampler->next_across_epochs(per_rank));
    if (!a.offload_dir.empty()) {  // look-ahead: the disk starts reading the next batch's rows now
      auto peek = *sampler;
      const auto next = data.train.batch(peek.next_across_epochs(per_rank));
      for (auto& tables : model->embedding_tables()) tables->advise(next);
    }
    b.optimizer->zero_grad();
    auto loss = torch::binary_cross_entropy_with_logits(model->forward(batch), batch.labels);
    booster.backward(loss, *b.optimizer);
    if (sparse_tables)  // the touched rows, averaged over the data-parallel ranks (or sent to their shards)
      for (auto& tables : model->embedding_tables()) tables->sparse_step(&dp_group);
    const double lr = b.lr_scheduler->lr();
    const bool stepped = b.optimizer->step();
    b.lr_scheduler->step();
    window_loss += loss.item<double>();
    ++window_steps;
    if (step % a.log_interval == 0 || step == total_steps) {
      auto l = torch::tensor({window_loss / window_steps}, torch::kFloat64);
      dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - window_start).count();
      std::vector<std::pair<std::string, double>> m = {{"loss", l.item<double>()}, {"lr", lr},
                                                       {"samples/s", window_steps * a.batch_size / s},
                                                       {"mem_gib", colossal::resident_gib()}};
      if (!stepped) m.push_back({"skipped", 1});
      if (cached) {
        CacheStats c;
        for (auto& tables : model->embedding_tables()) c += tables->cache_stats();
        m.push_back({"cache_hit_rate", c.hit_rate()});
        m.push_back({"cache_evictions", static_cast<double>(c.evictions)});
      }
      progress.step(step, m);
      summary.metrics["loss"] = l.item<double>();
      summary.metrics["steps"] = static_cast<double>(step);
      window_loss = 0;
      window_steps = 0;
      window_start = std::chrono::steady_clock::now();
    }
    const bool epoch_end = step % steps_per_epoch == 0;
    if (step != total_steps && (epoch_end || (a.save_interval > 0 && step % a.save_interval == 0))) {
      if (epoch_end) report_eval(step);
      save(step);
      window_start = std::chrono::steady_clock::now();  // throughput counts training only
    }
  }
  if (first_step <= total_steps) {
    report_eval(total_steps);
    save(total_steps);
  }
  if (r == 0) {
    std::printf("result: held-out AUC %.4f, log loss %.4f (always guessing the training click rate: %.4f); "
                "%.0f s in all; log %s (AUC per epoch as a PNG: colossal plot %s --metrics loss \"eval auc\")\n",
                summary.metrics["eval_auc"], summary.metrics["eval_log_loss"],
                [&] {
                  const double p = data.train.positive_rate(), q = data.held_out.positive_rate();
                  return -(q * std::log(p) + (1 - q) * std::log(1 - p));
                }(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), a.log_file.c_str(),
                a.log_file.c_str());
    std::fflush(stdout);
  }
  summary.outputs["checkpoints"] = a.save_dir + "/checkpoints";
  summary.outputs["log"] = a.log_file;
  dist::barrier(dist::world_group());
  if (own_runtime) dist::shutdown();
}

}  // namespace

namespace colossal::recsys_app {

colossal::apps::RunSummary train_recsys(const std::vector<std::string>& args) {
  return colossal::apps::run_job<TrainArgs>("train_recsys", args, &parse_train_args, &train);
}

}  // namespace colossal::recsys_app
