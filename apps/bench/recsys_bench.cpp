// bench_recsys: DLRM training speed on synthetic Criteo-shaped data (26 power-law fields, 13
// dense) with the embedding tables plain (the Booster's optimizer, dense gradients) and cached at
// several cache ratios (row-wise Adagrad, touched rows only), with each cache's hit rate; beside
// them the same DLRM in plain PyTorch (nn.EmbeddingBag + DDP, dense AdamW), in one run.
//
//   build/apps/bench_recsys                       # 2 ranks: it runs itself under colossal run
//   build/apps/bench_recsys --nproc 1 --table_size 1000000 --ratios 0.01,0.05 --no_torch
// Every step reads new samples (a stream), and the caches start cold: the hit rate is what the
// power law gives a cache of that size.
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "apps/bench/bench_util.h"
#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "recsys/data/synthetic.h"
#include "recsys/models/rec_model.h"

using namespace colossal;
using namespace colossal::recsys;

namespace {

struct Args {
  int64_t table_size = 200000, fields = 26, dim = 16, batch = 2048, steps = 60, warmup = 10;
  double zipf = 1.05;
  std::string ratios = "0.01,0.05,0.2,1";
  bool no_torch = false, worker = false;
  int nproc = 2;
  std::string python = COLOSSAL_DEFAULT_PYTHON;
};

struct Row {
  double samples_s = 0, hit_rate = -1;
};

Row measure(const Args& a, double ratio, const CtrDataset& data) {
  torch::manual_seed(0);
  RecModelOptions mo{.kind = "dlrm", .dense_features = 13, .table_sizes = data.table_sizes(),
                     .embedding_dim = a.dim, .cache_ratio = ratio};
  mo.cache.optimizer.kind = "adagrad";
  mo.cache.min_slots = 0;  // the ratio alone
  auto model = make_rec_model(mo);
  auto optimizer = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-3));
  booster::PluginConfig pc;
  pc.name = "ddp";
  auto plugin = booster::make_plugin(pc);
  const auto group = plugin->dims().group(dist::Axis::kDp);
  booster::Booster booster(plugin);
  auto b = booster.boost(model, optimizer);
  const int64_t local = a.batch / dist::world_size();
  const int64_t per_rank = data.size() / dist::world_size();  // this rank's stream
  std::chrono::steady_clock::time_point start;
  for (int64_t s = 0; s < a.warmup + a.steps; ++s) {
    if (s == a.warmup) {
      dist::barrier(dist::world_group());
      start = std::chrono::steady_clock::now();
      for (auto& t : model->embedding_tables()) t->reset_cache_stats();
    }
    std::vector<int64_t> rows;
    const int64_t begin = dist::rank() * per_rank + s * local;
    for (int64_t i = 0; i < local; ++i) rows.push_back(begin + i);
    const auto batch = data.batch(rows);
    b.optimizer->zero_grad();
    auto loss = torch::binary_cross_entropy_with_logits(model->forward(batch), batch.labels);
    booster.backward(loss, *b.optimizer);
    if (ratio > 0)
      for (auto& t : model->embedding_tables()) t->sparse_step(&group);
    b.optimizer->step();
  }
  dist::barrier(dist::world_group());
  Row r;
  r.samples_s = a.steps * a.batch / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (ratio > 0) {
    CacheStats c;
    for (auto& t : model->embedding_tables()) {
      const auto s = t->cache_stats();
      c.lookups += s.lookups, c.hits += s.hits;
    }
    r.hit_rate = c.hit_rate();
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  CLI::App app{"DLRM training speed with plain and cached embedding tables, beside plain PyTorch"};
  app.add_option("--table_size", a.table_size, "rows per table")->capture_default_str();
  app.add_option("--fields", a.fields, "sparse fields")->capture_default_str();
  app.add_option("--dim", a.dim, "embedding width")->capture_default_str();
  app.add_option("--batch", a.batch, "global batch")->capture_default_str();
  app.add_option("--steps", a.steps, "timed steps")->capture_default_str();
  app.add_option("--warmup", a.warmup, "untimed steps first")->capture_default_str();
  app.add_option("--zipf", a.zipf, "id popularity exponent")->capture_default_str();
  app.add_option("--ratios", a.ratios, "cache ratios to measure (comma-separated; 0: plain tables)")
      ->capture_default_str();
  app.add_flag("--no_torch", a.no_torch, "skip the PyTorch row");
  app.add_option("--python", a.python, "python with torch for the PyTorch row")->capture_default_str();
  app.add_option("--nproc", a.nproc, "ranks (the program runs itself under colossal run)")->capture_default_str();
  app.add_flag("--worker", a.worker, "(internal) one rank of the measurement");
  CLI11_PARSE(app, argc, argv);
  const std::string apps_dir = bench::self_path().substr(0, bench::self_path().rfind('/'));
  if (!a.worker) {  // the driver: our rows under colossal run, then PyTorch's, one after the other
    const std::string ours = apps_dir + "/colossal run --nproc_per_node " + std::to_string(a.nproc) + " -- " +
                             bench::self_path() + " --worker" +
                             bench::passthrough_args(argc, argv, {"--nproc", "--python"}, {"--no_torch"}) +
                             " 2>&1 | grep -v '^\\[colossal' | sed 's/^\\[rank 0\\] //'";
    if (std::system(ours.c_str()) != 0) return 1;
    if (a.no_torch) return 0;
    const std::string script = std::string(COLOSSAL_SOURCE_DIR) + "/apps/bench/recsys_torch_reference.py";
    const std::string args = " --table_size " + std::to_string(a.table_size) + " --fields " + std::to_string(a.fields) +
                             " --dim " + std::to_string(a.dim) + " --batch " + std::to_string(a.batch) + " --steps " +
                             std::to_string(a.steps) + " --warmup " + std::to_string(a.warmup);
    std::printf("  PyTorch (nn.EmbeddingBag + DDP, AdamW), %d rank(s): ", a.nproc);
    std::fflush(stdout);
    const std::string theirs = apps_dir + "/colossal run --nproc_per_node " + std::to_string(a.nproc) + " -- " +
                               a.python + " " + script + args + " 2>&1 | grep 'torch:' | sed 's/^\\[rank 0\\] //'";
    if (std::system(theirs.c_str()) != 0) std::printf("(the PyTorch row failed: %s)\n", theirs.c_str());
    return 0;
  }
  try {
    dist::init();
    const int r = dist::rank(), n = dist::world_size();
    SyntheticOptions so{.samples = a.batch * (a.warmup + a.steps), .fields = a.fields, .table_size = a.table_size,
                        .zipf = a.zipf};
    const auto data = make_synthetic(so, 0, so.samples);
    if (r == 0)
      std::printf("bench_recsys: DLRM, %ld fields x %ld rows x dim %ld (%.0f MB of tables), batch %ld over %d rank(s), "
                  "%ld timed steps after %ld, new samples every step\n", a.fields, a.table_size, a.dim,
                  a.fields * a.table_size * a.dim * 4 / 1e6, a.batch, n, a.steps, a.warmup);
    std::vector<double> ratios = {0};
    std::stringstream ss(a.ratios);
    for (std::string item; std::getline(ss, item, ',');) ratios.push_back(std::stod(item));
    double plain = 0;
    for (double ratio : ratios) {
      const auto row = measure(a, ratio, data);
      if (ratio == 0) plain = row.samples_s;
      if (r == 0) {
        if (ratio == 0) std::printf("  %-32s %9.0f samples/s\n", "plain tables (AdamW, dense)", row.samples_s);
        else
          std::printf("  cached %5.1f%% (Adagrad, by row)  %9.0f samples/s  hit rate %5.1f%%  (%.2fx plain)\n",
                      100 * ratio, row.samples_s, 100 * row.hit_rate, row.samples_s / plain);
        std::fflush(stdout);
      }
    }
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_recsys: %s\n", error_text(e).c_str());
    return 1;
  }
}
