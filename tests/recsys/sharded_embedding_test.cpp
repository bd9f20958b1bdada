// Sharded embedding tables: the planner's choices and errors; table-, row- and column-wise
// shards over 2 and 4 ranks equal one process holding every table (pooled outputs, and every
// row after several sparse steps); shards saved under one plan load under another; stores on the
// offload disk equal stores in memory.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <map>
#include <random>

#include "core/checkpoint/safetensors.h"
#include "core/common/fs.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "recsys/embedding/embedding_store.h"
#include "recsys/embedding/sharded_embedding.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace recsys_sharded_test {
using namespace colossal::recsys;
namespace dist = colossal::dist;

TEST(ShardingPlan, SmallTablesWholeLargeOnesSplit) {
  // 1000 rows hold most of the bytes: row-wise; the small ones whole, spread over the ranks.
  const auto plan = plan_sharding({1000, 10, 20, 30}, 8, {.sharding = "auto", .world = 2});
  EXPECT_EQ(plan[0].kind, "row");
  ASSERT_EQ(plan[0].shards.size(), 2u);
  EXPECT_EQ(plan[0].shards[1].row_begin, 500);
  for (int t = 1; t < 4; ++t) EXPECT_EQ(plan[t].kind, "table") << t;
  EXPECT_NE(plan[1].shards[0].rank, plan[3].shards[0].rank);  // balanced greedily
  // Explicit kinds; a table splits into at most `dim` columns and `rows` rows.
  const auto columns = plan_sharding({1000, 3}, 3, {.sharding = "column", .world = 4});
  EXPECT_EQ(columns[0].shards.size(), 3u);
  EXPECT_EQ(columns[0].shards[2].col_begin, 2);
  const auto rows = plan_sharding({3}, 8, {.sharding = "row", .world = 4});
  EXPECT_EQ(rows[0].shards.size(), 3u);
  // One rank: everything table-wise on it.
  for (const auto& t : plan_sharding({1000, 10}, 8, {.sharding = "auto", .world = 1})) EXPECT_EQ(t.kind, "table");
}

TEST(ShardingPlan, ErrorsNameTheProblem) {
  auto msg = colossal::testing::error_message_of(
      [] { plan_sharding({1'000'000}, 16, {.sharding = "table", .world = 2, .memory_per_rank = 1e6}); });
  EXPECT_NE(msg.find("on rank 0, which may hold"), std::string::npos) << msg;
  msg = colossal::testing::error_message_of([] { plan_sharding({10}, 4, {.sharding = "diagonal"}); });
  EXPECT_NE(msg.find("'diagonal': expected auto, table, row or column"), std::string::npos) << msg;
  msg = colossal::testing::error_message_of(
      [] { plan_sharding({10}, 4, {.sharding = "column", .world = 2, .allow_column = false}); });
  EXPECT_NE(msg.find("rowwise_adagrad"), std::string::npos) << msg;
}

// The test's data: per step, a global batch of 8 bags per rank (0-3 ids each; empty bags too)
// for each table, and a fixed target direction per table.
constexpr int64_t kBagsPerRank = 8, kDim = 6, kSteps = 4;
const std::vector<int64_t> kTables = {37, 5, 200};

struct Step {
  std::vector<torch::Tensor> ids, offsets;  // per table, the bags of ranks [first, first + count)
};

Step make_step(int step, int world, int first, int count) {
  std::mt19937 rng(100 + step);
  Step out;
  for (size_t t = 0; t < kTables.size(); ++t) {
    std::vector<int64_t> ids, offsets;
    for (int r = 0; r < world; ++r)
      for (int64_t b = 0; b < kBagsPerRank; ++b) {
        const int n = static_cast<int>(rng() % 4);
        const bool mine = r >= first && r < first + count;
        if (mine) offsets.push_back(static_cast<int64_t>(ids.size()));
        for (int k = 0; k < n; ++k) {
          const auto id = static_cast<int64_t>(rng() % kTables[t]);
          if (mine) ids.push_back(id);
        }
      }
    out.ids.push_back(torch::tensor(ids, torch::kInt64));
    out.offsets.push_back(torch::tensor(offsets, torch::kInt64));
  }
  return out;
}

ShardedEmbeddingOptions options(const std::string& sharding, const std::string& optimizer) {
  ShardedEmbeddingOptions o{.name = "embeddings", .table_sizes = kTables, .dim = kDim, .pooling = "mean",
                            .sharding = sharding};
  o.store.optimizer.kind = optimizer;
  o.store.optimizer.lr = 0.1;
  o.store.optimizer.weight_decay = 0.05;  // (Adagrad and Adam are otherwise blind to a gradient's scale)
  o.store.seed = 3;
  return o;
}

// One training step: loss = sum over tables and bags of <pooled, direction_t> / bags.
std::vector<torch::Tensor> train_step(ShardedEmbeddings& e, const Step& s) {
  auto out = e.forward(s.ids, s.offsets, true);
  torch::Tensor loss = torch::zeros({});
  for (size_t t = 0; t < out.size(); ++t) {
    const auto direction = torch::linspace(-1, 1 + static_cast<double>(t), kDim);
    loss = loss + (out[t] * direction).sum() / out[t].size(0);
  }
  loss.backward();
  e.step();
  std::vector<torch::Tensor> detached;
  for (auto& o : out) detached.push_back(o.detach());
  return detached;
}

std::map<std::string, torch::Tensor> tensors_of(ShardedEmbeddings& e, std::map<std::string, std::string>& metadata) {
  colossal::checkpoint::NamedTensors t;
  e.collect(t, metadata);
  return {t.begin(), t.end()};
}

// Every local shard's weights and state equal the same slice of the reference's whole tables.
void expect_shards_equal_reference(ShardedEmbeddings& sharded, ShardedEmbeddings& reference, const std::string& what) {
  std::map<std::string, std::string> meta, ref_meta;
  auto mine = tensors_of(sharded, meta);
  auto whole = tensors_of(reference, ref_meta);
  for (const auto& [key, text] : meta) {
    const std::string name = key.substr(6);
    int64_t r0, rows, c0, cols;
    std::istringstream(text) >> r0 >> rows >> c0 >> cols;
    const std::string table = name.substr(0, name.rfind('.'));
    const auto ref = whole.at(table + ".0.weight").narrow(0, r0, rows).narrow(1, c0, cols);
    EXPECT_TRUE(torch::allclose(mine.at(name + ".weight"), ref, 1e-5, 1e-6))
        << what << " " << name << " max diff " << (mine.at(name + ".weight") - ref).abs().max().item<double>();
  }
}

void run_sharded(const std::string& sharding, const std::string& optimizer) {
  const int world = dist::world_size(), rank = dist::rank();
  const auto& group = dist::world_group();
  ShardedEmbeddings sharded(options(sharding, optimizer), &group);
  ShardedEmbeddings reference(options("table", optimizer), nullptr);  // one process, the global batch
  for (int step = 0; step < kSteps; ++step) {
    const auto out = train_step(sharded, make_step(step, world, rank, 1));
    const auto ref = train_step(reference, make_step(step, world, 0, world));
    for (size_t t = 0; t < out.size(); ++t)
      EXPECT_TRUE(torch::allclose(out[t], ref[t].narrow(0, rank * kBagsPerRank, kBagsPerRank), 1e-5, 1e-6))
          << sharding << " step " << step << " table " << t;
  }
  expect_shards_equal_reference(sharded, reference, sharding + " after " + std::to_string(kSteps) + " steps");
  // The shards saved under this plan load under another (column-wise for row- and table-wise).
  const std::string dir = ::testing::TempDir() + "sharded_ckpt_" + sharding + "_" + std::to_string(world) + "_" +
                          std::to_string(::getppid());
  colossal::fs::make_dirs(dir);
  colossal::checkpoint::NamedTensors t;
  std::map<std::string, std::string> meta;
  sharded.collect(t, meta);
  colossal::checkpoint::save_safetensors(dir + "/rank-" + std::to_string(rank) + ".safetensors", t, meta);
  dist::barrier(group);
  std::vector<std::shared_ptr<colossal::checkpoint::SafetensorsFile>> files;
  for (int r = 0; r < world; ++r)
    files.push_back(colossal::checkpoint::SafetensorsFile::open(dir + "/rank-" + std::to_string(r) + ".safetensors"));
  const bool columns_ok = optimizer != "rowwise_adagrad";
  ShardedEmbeddings reloaded(options(sharding == "column" || !columns_ok ? "row" : "column", optimizer), &group);
  reloaded.load(files);
  expect_shards_equal_reference(reloaded, reference, sharding + " reloaded under another plan");
  // And it trains on as the reference does.
  const auto out = train_step(reloaded, make_step(kSteps, world, rank, 1));
  const auto ref = train_step(reference, make_step(kSteps, world, 0, world));
  for (size_t k = 0; k < out.size(); ++k)
    EXPECT_TRUE(torch::allclose(out[k], ref[k].narrow(0, rank * kBagsPerRank, kBagsPerRank), 1e-5, 1e-6)) << k;
  expect_shards_equal_reference(reloaded, reference, sharding + " reloaded, one more step");
}

TEST(ShardedEmbeddings, EachShardingOnTwoRanksEqualsOneProcess) {
  colossal::testing::run_ranks(2, [] {
    for (const char* s : {"table", "row", "column", "auto"}) run_sharded(s, "adagrad");
    run_sharded("row", "adamw");
    run_sharded("table", "rowwise_adagrad");
  });
}

TEST(ShardedEmbeddings, EachShardingOnFourRanksEqualsOneProcess) {
  colossal::testing::run_ranks(4, [] {
    for (const char* s : {"table", "row", "column"}) run_sharded(s, "adagrad");
    run_sharded("column", "adamw");
  });
}

TEST(ShardedEmbeddings, BadIdsAndMissingShardsAreNamed) {
  ShardedEmbeddings e(options("row", "adagrad"), nullptr);
  auto msg = colossal::testing::error_message_of([&] {
    e.forward({torch::tensor({1}), torch::tensor({5}), torch::tensor({0})},
              {torch::tensor({0}), torch::tensor({0}), torch::tensor({0})}, true);
  });
  EXPECT_NE(msg.find("embeddings table 1: id 5 outside the table of 5 rows"), std::string::npos) << msg;
  msg = colossal::testing::error_message_of([&] { e.load({}); });
  EXPECT_NE(msg.find("cover 0 of the 222 elements of embeddings table 0"), std::string::npos) << msg;
}

// The stores on the offload disk (memory-mapped files) train as the stores in memory do.
TEST(EmbeddingOffload, MappedTablesEqualTablesInMemory) {
  const std::string dir = ::testing::TempDir() + "offload_" + std::to_string(::getpid());
  colossal::fs::make_dirs(dir);
  for (bool cached : {false, true}) {
    // 600 ids a step through 1,000 slots of 4,000 rows: hundreds of misses and evictions a step,
    // copied by several threads on the disk tier.
    EmbeddingStoreOptions o{.rows = 4000, .dim = 4, .cache_ratio = 0.25, .min_slots = 0,
                            .optimizer = {.kind = "rowwise_adagrad", .lr = 0.1}, .seed = 9};
    auto memory = make_embedding_store(o, cached);
    o.offload_dir = dir;
    auto disk = make_embedding_store(o, cached);
    EXPECT_TRUE(torch::equal(memory->table(), disk->table()));
    std::mt19937 rng(1);
    for (int step = 0; step < 20; ++step) {
      std::vector<int64_t> ids;
      for (int i = 0; i < 600; ++i) ids.push_back(static_cast<int64_t>(rng() % 4000));
      const auto t = torch::tensor(ids, torch::kInt64), offsets = torch::arange(0, 600, 3, torch::kInt64);
      disk->advise(t);
      for (auto* s : {memory.get(), disk.get()}) {
        (s->forward(t, offsets) * torch::arange(4)).sum().backward();
        s->step();
      }
    }
    memory->flush();
    disk->flush();
    EXPECT_TRUE(torch::equal(memory->table(), disk->table())) << "cached " << cached;
    EXPECT_TRUE(torch::equal(memory->state(), disk->state())) << "cached " << cached;
    if (cached) EXPECT_GT(disk->stats().evictions, 2000) << "the cache was too large to evict";
    EXPECT_FALSE(torch::equal(memory->table(), make_embedding_store(o, cached)->table()));  // it trained
  }
  // Nothing is left behind in the directory: the files were unlinked when created.
  EXPECT_TRUE(colossal::fs::list_dir(dir).empty());
  const auto msg = colossal::testing::error_message_of([] {
    make_embedding_store({.rows = 10, .dim = 2, .offload_dir = "/nonexistent/tier"}, false);
  });
  EXPECT_NE(msg.find("offload_dir '/nonexistent/tier' is not an existing directory"), std::string::npos) << msg;
}

}  // namespace recsys_sharded_test
