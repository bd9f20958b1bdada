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

#include "apps/common/train_loop.h"
#include "apps/recsys/train_args.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/common/check.h"
#include "core/checkpoint/safetensors.h"
#include "core/common/fs.h"
#include "core/common/progress.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
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
                     .table_size = a.synthetic_table_size, .zipf = a.synthetic_zipf, .seed = a.loop.seed};
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
  colossal::apps::TrainJob job(a.loop, a.plugin);  // the runtime; colossal verify's one-process reference
  job.lock_output(a.save_dir);                     // one job per output, before anything is written there
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
  const int64_t accumulation = a.loop.accumulation_steps;
  COLOSSAL_CHECK(a.batch_size % (n * accumulation) == 0, "--batch_size ", a.batch_size, " does not split over ", n,
                 " data-parallel rank(s) x ", accumulation, " micro-batch(es) (--accumulation_steps)");
  const int64_t per_rank = a.batch_size / (n * accumulation);  // one micro-batch of one rank
  colossal::fs::make_dirs(a.save_dir);
  const std::string log_file = a.loop.log_file.empty() ? a.save_dir + "/log.jsonl" : a.loop.log_file;

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
  torch::manual_seed(a.loop.seed);
  RecModelOptions mo{.kind = a.model, .dense_features = static_cast<int64_t>(data.train.dense_names.size()),
                     .table_sizes = data.train.table_sizes(), .embedding_dim = a.embedding_dim,
                     .bottom_mlp = a.bottom_mlp, .top_mlp = a.top_mlp, .pooling = a.pooling,
                     .cache_ratio = a.cache_ratio, .sharding = a.sharding, .group = &dp_group,
                     .memory_per_rank = table_memory_per_rank(a, dp_group)};
  mo.cache.eviction = a.eviction;
  mo.cache.optimizer.kind = a.sparse_optimizer;
  mo.cache.optimizer.lr = a.sparse_lr;
  mo.cache.seed = a.loop.seed;
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
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  if (r == 0)
    std::printf("model: %s, %.2fM parameters, embedding dim %ld (%s pooling); batch %ld over all ranks\n",
                a.model.c_str(), parameters / 1e6, a.embedding_dim, a.pooling.c_str(), a.batch_size);

  colossal::apps::TrainTask task;
  task.name = "train_recsys";
  task.plugin = plugin;
  task.model = model;
  task.optimizer = std::make_shared<torch::optim::AdamW>(model->parameters(),
                                                         torch::optim::AdamWOptions(a.lr).weight_decay(a.weight_decay));
  task.schedule = [](int64_t total_steps) {
    return colossal::optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = total_steps / 20,
                                                 .total_steps = total_steps, .min_lr_ratio = 0.1};
  };
  task.train_samples = data.train.size();
  task.micro_batch = per_rank;
  task.epochs = a.epochs;
  task.epoch_period = 1;  // held-out AUC and a checkpoint at every epoch's end
  task.batch_flag = "--batch_size " + std::to_string(a.batch_size);
  task.length_flags = "--epochs or --max_steps";
  task.loss = [&](colossal::apps::StepContext& ctx) {
    const auto batch = data.train.batch(ctx.positions);
    if (!a.offload_dir.empty()) {  // look-ahead: the disk starts reading the next batch's rows now
      auto peek = ctx.sampler;
      const auto next = data.train.batch(peek.next_across_epochs(per_rank));
      for (auto& tables : model->embedding_tables()) tables->advise(next);
    }
    return torch::binary_cross_entropy_with_logits(model->forward(batch), batch.labels);
  };
  if (sparse_tables)  // the touched rows, averaged over the data-parallel ranks (or sent to their shards)
    task.before_optimizer_step = [&] {
      for (auto& tables : model->embedding_tables()) tables->sparse_step(&dp_group);
    };
  if (cached)
    task.log_metrics = [&](colossal::apps::Metrics& m, auto&) {
      CacheStats c;
      for (auto& tables : model->embedding_tables()) c += tables->cache_stats();
      m.push_back({"cache_hit_rate", c.hit_rate()});
      m.push_back({"cache_evictions", static_cast<double>(c.evictions)});
    };
  task.evaluate = [&](const colossal::apps::EvalContext&) -> std::optional<colossal::apps::Metrics> {
    const auto e = evaluate(*model, data.held_out);
    return colossal::apps::Metrics{{"auc", e.auc}, {"log_loss", e.log_loss}};
  };
  task.eval_samples = data.held_out.size();
  task.eval_flag = "--held_out_fraction " + std::to_string(a.held_out_fraction);
  task.checkpoint_dir = a.save_dir + "/checkpoints";
  task.log_file = log_file;
  task.before_save = [&] {  // the cached tables' buffers hold every row's latest values
    for (auto& tables : model->embedding_tables()) tables->flush();
  };
  if (sharded) task.save_rank_state = [&](const std::string& dir) { save_sharded_tables(*model, dir); };
  task.load_rank_state = [&](const std::string& dir) { load_sharded_tables(*model, dir); };
  task.after_resume = [&](int64_t first_step, int64_t, const colossal::data::DistributedSampler&) {
    if (first_step > 1)  // the cached tables' buffers were loaded: their caches start over (sharded: load() did)
      for (auto& tables : model->embedding_tables()) tables->invalidate();
  };
  const auto run = job.run(task, summary);
  if (run.recorded) return;
  if (r == 0) {
    std::printf("result: held-out AUC %.4f, log loss %.4f (always guessing the training click rate: %.4f); "
                "%.0f s in all; log %s (AUC per epoch as a PNG: colossal plot %s --metrics loss \"eval auc\")\n",
                summary.metrics["eval_auc"], summary.metrics["eval_log_loss"],
                [&] {
                  const double p = data.train.positive_rate(), q = data.held_out.positive_rate();
                  return -(q * std::log(p) + (1 - q) * std::log(1 - p));
                }(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), log_file.c_str(),
                log_file.c_str());
    std::fflush(stdout);
  }
  summary.outputs["checkpoints"] = task.checkpoint_dir;
  summary.outputs["log"] = log_file;
  dist::barrier(dist::world_group());
}

}  // namespace

namespace colossal::recsys_app {

colossal::apps::RunSummary train_recsys(const std::vector<std::string>& args) {
  return colossal::apps::run_job<TrainArgs>("train_recsys", args, &parse_train_args, &train);
}

}  // namespace colossal::recsys_app
