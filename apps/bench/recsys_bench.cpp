// bench_recsys: DLRM training speed on synthetic Criteo-shaped data (26 power-law fields, 13
// dense) with the embedding tables plain (the Booster's optimizer, dense gradients), cached at
// several cache ratios (row-wise Adagrad, touched rows only) with each cache's hit rate, and
// sharded over the ranks; beside them the same DLRM in plain PyTorch (nn.EmbeddingBag + DDP,
// dense AdamW), in one run. With --offload_gib, one more row: tables of that size in all, sharded
// row-wise over the ranks, kept in memory-mapped files on the offload disk with a cache of hot
// rows (for tables larger than the machine's memory).
//
//   build/apps/bench_recsys                       # 2 ranks: it runs itself under colossal run
//   build/apps/bench_recsys --nproc 1 --table_size 1000000 --ratios 0.01,0.05 --no_torch
//   build/apps/bench_recsys --ratios "" --shardings "" --no_torch --offload_dir /data --offload_gib 40 --dim 64
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
#include "core/common/check.h"
#include "core/common/progress.h"
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
  std::string shardings = "table,row,column";
  std::string offload_dir;
  double offload_gib = 0, offload_ratio = 0.01;
  bool no_torch = false, no_plain = false, worker = false;
  int nproc = 2;
  std::string python = COLOSSAL_DEFAULT_PYTHON;
};

struct Row {
  double samples_s = 0, hit_rate = -1;
};

struct Variant {
  double cache_ratio = 0;
  std::string sharding = "none";
  std::string optimizer = "adagrad";
  std::string offload_dir;
};

Row measure(const Args& a, const Variant& v, const CtrDataset& data) {
  torch::manual_seed(0);
  booster::PluginConfig pc;
  pc.name = "ddp";
  auto plugin = booster::make_plugin(pc);
  const auto group = plugin->dims().group(dist::Axis::kDp);
  RecModelOptions mo{.kind = "dlrm", .dense_features = 13, .table_sizes = data.table_sizes(),
                     .embedding_dim = a.dim, .cache_ratio = v.cache_ratio, .sharding = v.sharding, .group = &group};
  mo.cache.optimizer.kind = v.optimizer;
  mo.cache.min_slots = 0;  // the ratio alone
  mo.cache.offload_dir = v.offload_dir;
  const bool sparse = v.cache_ratio > 0 || v.sharding != "none";
  auto setup_start = std::chrono::steady_clock::now();
  auto model = make_rec_model(mo);
  if (!v.offload_dir.empty() && dist::rank() == 0)
    std::printf("  (tables created on the offload disk in %.0f s)\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - setup_start).count());
  auto optimizer = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-3));
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
    auto rows_of = [&](int64_t step) {
      std::vector<int64_t> rows;
      const int64_t begin = dist::rank() * per_rank + step * local;
      for (int64_t i = 0; i < local && begin + i < data.size(); ++i) rows.push_back(begin + i);
      return rows;
    };
    const auto batch = data.batch(rows_of(s));
    if (!v.offload_dir.empty() && s + 1 < a.warmup + a.steps) {  // look-ahead: the disk reads the next rows now
      const auto next = data.batch(rows_of(s + 1));
      for (auto& t : model->embedding_tables()) t->advise(next);
    }
    b.optimizer->zero_grad();
    auto loss = torch::binary_cross_entropy_with_logits(model->forward(batch), batch.labels);
    booster.backward(loss, *b.optimizer);
    if (sparse)
      for (auto& t : model->embedding_tables()) t->sparse_step(&group);
    b.optimizer->step();
  }
  dist::barrier(dist::world_group());
  Row r;
  r.samples_s = a.steps * a.batch / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (v.cache_ratio > 0) {
    auto counts = torch::zeros({2}, torch::kFloat64);
    for (auto& t : model->embedding_tables()) {
      const auto c = t->cache_stats();
      counts[0] += static_cast<double>(c.lookups);
      counts[1] += static_cast<double>(c.hits);
    }
    dist::all_reduce(counts, dist::world_group());  // sharded caches: every rank's
    r.hit_rate = counts[1].item<double>() / std::max(1.0, counts[0].item<double>());
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
  app.add_option("--shardings", a.shardings, "sharded layouts to measure (comma-separated: table, row, column, auto)")
      ->capture_default_str();
  app.add_option("--offload_dir", a.offload_dir, "the offload disk's directory, for the --offload_gib row");
  app.add_option("--offload_gib", a.offload_gib, "tables of this many GiB in all on the offload disk (0: no such row)")
      ->capture_default_str();
  app.add_option("--offload_ratio", a.offload_ratio, "the offload row's cache ratio")->capture_default_str();
  app.add_flag("--no_torch", a.no_torch, "skip the PyTorch row");
  app.add_flag("--no_plain", a.no_plain, "skip the plain tables' row");
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
    double plain = 0;
    auto report = [&](const std::string& what, const Row& row, bool against_plain = true) {
      if (r != 0) return;
      std::printf("  %-40s %9.0f samples/s", what.c_str(), row.samples_s);
      if (row.hit_rate >= 0) std::printf("  hit rate %5.1f%%", 100 * row.hit_rate);
      if (plain > 0 && against_plain) std::printf("  (%.2fx plain)", row.samples_s / plain);
      std::printf("\n");
      std::fflush(stdout);
    };
    if (!a.no_plain) {
      const auto plain_row = measure(a, {}, data);
      report("plain tables (AdamW, dense)", plain_row);
      plain = plain_row.samples_s;
    }
    for (const auto& ratio : bench::split_list(a.ratios)) {
      char what[64];
      std::snprintf(what, sizeof what, "cached %5.1f%% (Adagrad, by row)", 100 * std::stod(ratio));
      report(what, measure(a, {.cache_ratio = std::stod(ratio)}, data));
    }
    for (const auto& sharding : bench::split_list(a.shardings))
      report("sharded " + sharding + "-wise (Adagrad, by row)", measure(a, {.sharding = sharding}, data));
    if (a.offload_gib > 0) {
      COLOSSAL_CHECK(!a.offload_dir.empty(), "--offload_gib needs --offload_dir");
      Args big = a;
      big.table_size = static_cast<int64_t>(a.offload_gib * (1LL << 30) / (a.fields * a.dim * 4.0));
      SyntheticOptions bo = so;
      bo.table_size = big.table_size;
      const auto big_data = make_synthetic(bo, 0, bo.samples);
      if (r == 0)
        std::printf("  offload row: %ld fields x %ld rows x dim %ld = %.1f GiB of tables (+ row-wise Adagrad state), "
                    "row-wise over %d rank(s) in '%s', cache %.1f%%; %.1f GiB of memory available\n",
                    a.fields, big.table_size, a.dim, a.fields * big.table_size * a.dim * 4.0 / (1LL << 30), n,
                    a.offload_dir.c_str(), 100 * a.offload_ratio, available_memory_gib());
      const auto row = measure(big, {.cache_ratio = a.offload_ratio, .sharding = "row",
                                     .optimizer = "rowwise_adagrad", .offload_dir = a.offload_dir}, big_data);
      report("offloaded tables, cached, sharded by rows", row, false);
      if (r == 0) std::printf("  (resident memory of rank 0 after: %.1f GiB)\n", resident_gib());
    }
    dist::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_recsys: %s\n", error_text(e).c_str());
    return 1;
  }
}
