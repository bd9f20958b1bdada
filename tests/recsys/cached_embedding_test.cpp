// The cached embedding bag: training through a small cache, with eviction, is the same
// computation as the whole table resident (and, for Adagrad, as LibTorch's dense EmbeddingBag
// with torch::optim::Adagrad).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <random>

#include "recsys/embedding/cached_embedding.h"
#include "tests/support/errors.h"

namespace recsys_cache_test {
using namespace colossal::recsys;

// Batches of 16 bags (1-3 ids each) over `rows` ids with a power-law popularity.
struct Batches {
  std::vector<torch::Tensor> ids, offsets, targets;
  Batches(int64_t rows, int64_t dim, int steps) {
    std::mt19937 rng(5);
    std::vector<double> w(rows);
    for (int64_t r = 0; r < rows; ++r) w[r] = 1.0 / std::pow(r + 1.0, 1.1);
    std::discrete_distribution<int64_t> pick(w.begin(), w.end());
    for (int s = 0; s < steps; ++s) {
      std::vector<int64_t> i, o;
      for (int b = 0; b < 16; ++b) {
        o.push_back(static_cast<int64_t>(i.size()));
        for (int k = 0; k <= static_cast<int>(rng() % 3); ++k) i.push_back((pick(rng) * 37) % rows);
      }
      ids.push_back(torch::tensor(i, torch::kInt64));
      offsets.push_back(torch::tensor(o, torch::kInt64));
      targets.push_back(torch::randn({16, dim}));
    }
  }
};

CachedEmbeddingOptions options(double ratio, const std::string& eviction, const std::string& kind) {
  CachedEmbeddingOptions o;
  o.rows = 500;
  o.dim = 8;
  o.cache_ratio = ratio;
  o.min_slots = 0;  // the ratio alone: these tables are small
  o.eviction = eviction;
  o.optimizer.kind = kind;
  o.optimizer.lr = 0.05;
  o.optimizer.weight_decay = kind == "adamw" ? 0.01 : 0.0;
  o.seed = 11;
  return o;
}

double train(CachedEmbeddingBag& bag, const Batches& data) {
  double loss_sum = 0;
  for (size_t s = 0; s < data.ids.size(); ++s) {
    auto pooled = bag.forward(data.ids[s], data.offsets[s]);
    auto loss = ((pooled - data.targets[s]).pow(2)).sum();
    loss.backward();
    bag.step();
    loss_sum += loss.item<double>();
  }
  bag.flush();
  return loss_sum;
}

TEST(CachedEmbedding, AdagradThroughASmallCacheEqualsTorchDense) {
  torch::manual_seed(0);
  const Batches data(500, 8, 300);
  for (const char* eviction : {"lfu", "lru"}) {
    CachedEmbeddingBag bag(options(0.1, eviction, "adagrad"));  // 50 slots for 500 rows
    auto table = bag.table().clone().set_requires_grad(true);    // the same start
    torch::optim::Adagrad reference({table}, torch::optim::AdagradOptions(0.05));
    train(bag, data);
    for (size_t s = 0; s < data.ids.size(); ++s) {
      reference.zero_grad();
      auto pooled = std::get<0>(torch::embedding_bag(table, data.ids[s], data.offsets[s], false, 0));
      ((pooled - data.targets[s]).pow(2)).sum().backward();
      reference.step();
    }
    EXPECT_GT(bag.stats().evictions, 1000) << eviction << ": the test must evict";
    const double diff = (bag.table() - table.detach()).abs().max().item<double>();
    EXPECT_LE(diff, 1e-6) << eviction;
  }
}

TEST(CachedEmbedding, AdamwThroughASmallCacheEqualsTheResidentTable) {
  torch::manual_seed(0);
  const Batches data(500, 8, 300);
  for (const char* eviction : {"lfu", "lru"}) {
    CachedEmbeddingBag cached(options(0.1, eviction, "adamw"));
    CachedEmbeddingBag resident(options(1.0, eviction, "adamw"));
    const double a = train(cached, data), b = train(resident, data);
    EXPECT_NEAR(a, b, 1e-6 * std::abs(b)) << eviction;
    EXPECT_EQ(resident.stats().evictions, 0);
    EXPECT_GT(cached.stats().evictions, 1000);
    EXPECT_LE((cached.table() - resident.table()).abs().max().item<double>(), 1e-6) << eviction;
    EXPECT_LE((cached.state() - resident.state()).abs().max().item<double>(), 1e-6) << eviction;
  }
}

TEST(CachedEmbedding, UpdatesOfRowsOutsideTheCacheReachTheTable) {
  // What another rank touched: rows this rank never read are updated in the table itself.
  CachedEmbeddingBag cached(options(0.1, "lfu", "adamw"));
  CachedEmbeddingBag resident(options(1.0, "lfu", "adamw"));
  for (auto* bag : {&cached, &resident}) {
    bag->forward(torch::tensor({1, 2, 3}, torch::kInt64), torch::tensor({0}, torch::kInt64));
    bag->apply(torch::tensor({2, 400, 499}, torch::kInt64), torch::ones({3, 8}));
    bag->flush();
  }
  EXPECT_TRUE(torch::allclose(cached.table(), resident.table()));
  EXPECT_FALSE(torch::allclose(cached.table()[400], CachedEmbeddingBag(options(1.0, "lfu", "adamw")).table()[400]));
}

TEST(CachedEmbedding, WarmUpAndPrefetchRaiseTheHitRate) {
  torch::manual_seed(0);
  const Batches data(500, 8, 200);
  std::vector<int64_t> counts(500, 0);
  for (const auto& ids : data.ids)
    for (int64_t i = 0; i < ids.numel(); ++i) ++counts[ids[i].item<int64_t>()];
  CachedEmbeddingBag cold(options(0.1, "lfu", "adagrad")), warm(options(0.1, "lfu", "adagrad"));
  warm.warm_up(counts);
  train(cold, data);
  train(warm, data);
  EXPECT_GT(warm.stats().hit_rate(), cold.stats().hit_rate());
  EXPECT_GT(warm.stats().hit_rate(), 0.5);
  // A prefetched batch is all hits.
  CachedEmbeddingBag bag(options(0.1, "lru", "adagrad"));
  bag.prefetch(data.ids[7]);
  const auto before = bag.stats();
  bag.forward(data.ids[7], data.offsets[7]);
  EXPECT_EQ(bag.stats().misses, before.misses);
  EXPECT_GT(bag.stats().hits, before.hits);
}

TEST(CachedEmbedding, ErrorsNameTheProblem) {
  CachedEmbeddingBag bag(options(0.01, "lfu", "adagrad"));  // 5 slots
  auto msg = colossal::testing::error_message_of([&] {
    bag.forward(torch::arange(10, torch::kInt64), torch::tensor({0}, torch::kInt64));
  });
  EXPECT_NE(msg.find("10 distinct ids does not fit the cache's 5 slots"), std::string::npos) << msg;
  msg = colossal::testing::error_message_of([&] {
    bag.forward(torch::tensor({500}, torch::kInt64), torch::tensor({0}, torch::kInt64));
  });
  EXPECT_NE(msg.find("outside the table of 500 rows"), std::string::npos) << msg;
  auto o = options(0.1, "fifo", "adagrad");
  msg = colossal::testing::error_message_of([&] { CachedEmbeddingBag b(o); });
  EXPECT_NE(msg.find("eviction 'fifo'"), std::string::npos) << msg;
}

}  // namespace recsys_cache_test
