#include "recsys/models/rec_model.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/group.h"

namespace colossal::recsys {
namespace {

class Dlrm : public RecModel {
 public:
  explicit Dlrm(const RecModelOptions& o) : RecModel("Dlrm") {
    auto bottom_widths = o.bottom_mlp;
    bottom_widths.push_back(o.embedding_dim);
    bottom_ = register_module("bottom", mlp(o.dense_features, bottom_widths));
    tables_ = register_module("embeddings",
                              EmbeddingTables("embeddings", o.embedding_dim, o));
    const int64_t vectors = static_cast<int64_t>(o.table_sizes.size()) + 1;
    pairs_ = torch::triu_indices(vectors, vectors, 1);
    auto top_widths = o.top_mlp;
    top_widths.push_back(1);
    top_ = register_module("top", mlp(o.embedding_dim + vectors * (vectors - 1) / 2, top_widths));
  }

  torch::Tensor forward(const CtrBatch& b) override {
    auto x = torch::relu(bottom_->forward(b.dense));
    auto vectors = tables_->forward(b);
    vectors.insert(vectors.begin(), x);
    auto t = torch::stack(vectors, 1);              // [B, F + 1, d]
    auto z = torch::bmm(t, t.transpose(1, 2));      // every pairwise dot product
    auto pairs = z.index({torch::indexing::Slice(), pairs_[0], pairs_[1]});  // [B, (F + 1) F / 2]
    return top_->forward(torch::cat({x, pairs}, 1)).squeeze(1);
  }
  std::vector<EmbeddingTables> embedding_tables() override { return {tables_}; }

 private:
  torch::nn::Sequential bottom_{nullptr}, top_{nullptr};
  EmbeddingTables tables_{nullptr};
  torch::Tensor pairs_;
};

class DeepFm : public RecModel {
 public:
  explicit DeepFm(const RecModelOptions& o) : RecModel("DeepFm") {
    tables_ = register_module("embeddings", EmbeddingTables("embeddings", o.embedding_dim, o));
    weights_ = register_module("first_order", EmbeddingTables("first_order", 1, o));
    dense_linear_ = register_module("dense_linear", torch::nn::Linear(o.dense_features, 1));
    dense_vector_ = register_module("dense_vector", torch::nn::Linear(o.dense_features, o.embedding_dim));
    auto deep_widths = o.top_mlp;
    deep_widths.push_back(1);
    const int64_t vectors = static_cast<int64_t>(o.table_sizes.size()) + 1;
    deep_ = register_module("deep", mlp(vectors * o.embedding_dim, deep_widths));
  }

  torch::Tensor forward(const CtrBatch& b) override {
    auto first = dense_linear_->forward(b.dense).squeeze(1);
    for (auto& w : weights_->forward(b)) first = first + w.squeeze(1);
    auto vectors = tables_->forward(b);
    vectors.push_back(dense_vector_->forward(b.dense));
    auto v = torch::stack(vectors, 1);  // [B, F + 1, d]
    auto sum = v.sum(1);
    auto second = 0.5 * (sum * sum - (v * v).sum(1)).sum(1);  // all pairwise field interactions
    auto deep = deep_->forward(v.flatten(1)).squeeze(1);
    return first + second + deep;
  }
  std::vector<EmbeddingTables> embedding_tables() override { return {tables_, weights_}; }

 private:
  EmbeddingTables tables_{nullptr}, weights_{nullptr};
  torch::nn::Linear dense_linear_{nullptr}, dense_vector_{nullptr};
  torch::nn::Sequential deep_{nullptr};
};

}  // namespace

void RecModelOptions::validate() const {
  COLOSSAL_CHECK(kind == "dlrm" || kind == "deepfm", "[recsys] model '", kind, "': expected dlrm or deepfm");
  COLOSSAL_CHECK(pooling == "sum" || pooling == "mean", "[recsys] pooling '", pooling, "': expected sum or mean");
  COLOSSAL_CHECK(dense_features >= 1, "[recsys] dense_features ", dense_features, ": expected >= 1");
  COLOSSAL_CHECK(!table_sizes.empty(), "[recsys] no sparse fields");
  COLOSSAL_CHECK(embedding_dim >= 1, "[recsys] embedding_dim ", embedding_dim, ": expected >= 1");
  for (size_t i = 0; i < table_sizes.size(); ++i)
    COLOSSAL_CHECK(table_sizes[i] >= 1, "[recsys] table ", i, " has ", table_sizes[i], " rows");
  COLOSSAL_CHECK(cache_ratio >= 0 && cache_ratio <= 1, "[recsys] cache_ratio ", cache_ratio,
                 ": expected in [0, 1] (0: plain embedding bags)");
  COLOSSAL_CHECK(sharding == "none" || sharding == "auto" || sharding == "table" || sharding == "row" ||
                     sharding == "column",
                 "[recsys] sharding '", sharding, "': expected none, auto, table, row or column");
}

EmbeddingTablesImpl::EmbeddingTablesImpl(const std::string& name, int64_t dim, const RecModelOptions& o) {
  const auto& sizes = o.table_sizes;
  if (o.sharding != "none") {
    ShardedEmbeddingOptions so{.name = name, .table_sizes = sizes, .dim = dim, .pooling = o.pooling,
                               .sharding = o.sharding, .cached = o.cache_ratio > 0, .store = o.cache,
                               .memory_per_rank = o.memory_per_rank};
    so.store.cache_ratio = o.cache_ratio > 0 ? o.cache_ratio : 1;
    sharded = std::make_shared<ShardedEmbeddings>(so, o.group);
    return;
  }
  const auto mode = o.pooling == "mean" ? torch::nn::EmbeddingBagMode(torch::kMean) : torch::nn::EmbeddingBagMode(torch::kSum);
  auto list = register_module("tables", std::make_shared<torch::nn::Module>("Tables"));
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (o.cache_ratio > 0) {
      CachedEmbeddingOptions c = o.cache;
      c.rows = sizes[i];
      c.dim = dim;
      c.pooling = o.pooling;
      c.cache_ratio = o.cache_ratio;
      // Each table its own values; the same as a sharded table's (ShardedEmbeddingOptions::table_seed).
      c.seed = ShardedEmbeddingOptions{.dim = dim, .store = o.cache}.table_seed(i);
      auto bag = std::make_shared<CachedEmbeddingBag>(c);
      auto holder = list->register_module(std::to_string(i), std::make_shared<torch::nn::Module>("CachedTable"));
      holder->register_buffer("weight", bag->table());
      holder->register_buffer("state", bag->state());
      cached_tables.push_back(bag);
      continue;
    }
    auto t = torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(sizes[i], dim).mode(mode));
    torch::NoGradGuard no_grad;
    // Small, as DLRM's uniform(+-1/sqrt(rows)): an id seen rarely (or only at test time, after
    // a time split) contributes little until training has moved it.
    const double bound = 1 / std::sqrt(static_cast<double>(sizes[i]));
    t->weight.uniform_(-bound, bound);
    tables.push_back(list->register_module(std::to_string(i), t));
  }
}

std::vector<torch::Tensor> EmbeddingTablesImpl::forward(const CtrBatch& b) {
  if (sharded) return sharded->forward(b.ids, b.offsets, is_training());
  const size_t n = cached() ? cached_tables.size() : tables.size();
  COLOSSAL_CHECK(b.ids.size() == n, "[recsys] a batch of ", b.ids.size(), " sparse fields for ", n,
                 " embedding tables");
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < n; ++i) {
    if (!cached()) out.push_back(tables[i]->forward(b.ids[i], b.offsets[i]));
    // Training goes through the cache; evaluation (eval mode) reads the table, whatever the batch.
    else if (is_training()) out.push_back(cached_tables[i]->forward(b.ids[i], b.offsets[i]));
    else out.push_back(cached_tables[i]->lookup(b.ids[i], b.offsets[i]));
  }
  return out;
}

void EmbeddingTablesImpl::sparse_step(const dist::Group* group) {
  if (sharded) return sharded->step();
  for (auto& bag : cached_tables) {
    auto [rows, grads] = bag->gradients();
    if (group && group->is_member() && group->size() > 1) {
      // Sparse all-reduce: every rank's (rows, gradients), padded to the longest, gathered;
      // summed per row and divided by the ranks (the data-parallel mean).
      const int n = group->size();
      auto count = torch::tensor({rows.numel()}, torch::kInt64);
      auto counts = torch::empty({n}, torch::kInt64);
      dist::all_gather(counts, count, *group);
      const int64_t longest = counts.max().item<int64_t>();
      auto padded_rows = torch::full({longest}, -1, torch::kInt64);
      auto padded_grads = torch::zeros({longest, grads.size(1)});
      padded_rows.narrow(0, 0, rows.numel()).copy_(rows);
      padded_grads.narrow(0, 0, rows.numel()).copy_(grads);
      auto all_rows = torch::empty({n * longest}, torch::kInt64);
      auto all_grads = torch::empty({n * longest, grads.size(1)});
      dist::all_gather(all_rows, padded_rows, *group);
      dist::all_gather(all_grads, padded_grads.flatten(), *group);
      const auto valid = all_rows.ge(0).nonzero().squeeze(1);
      all_rows = all_rows.index_select(0, valid);
      all_grads = all_grads.view({n * longest, grads.size(1)}).index_select(0, valid);
      auto [unique, inverse] = at::_unique(all_rows, /*sorted=*/true, /*return_inverse=*/true);
      auto merged = torch::zeros({unique.numel(), grads.size(1)}).index_add_(0, inverse, all_grads) / n;
      rows = unique;
      grads = merged;
    }
    bag->apply(rows, grads);
  }
}

void EmbeddingTablesImpl::flush() {
  if (sharded) sharded->flush();
  for (auto& bag : cached_tables) bag->flush();
}

void EmbeddingTablesImpl::invalidate() {
  for (auto& bag : cached_tables) bag->drop_cache();
}

void EmbeddingTablesImpl::advise(const CtrBatch& next) {
  for (size_t i = 0; i < next.ids.size(); ++i) {
    if (sharded) sharded->advise(i, next.ids[i]);
    else if (i < cached_tables.size()) cached_tables[i]->advise(next.ids[i]);
  }
}

void EmbeddingTablesImpl::warm_up(const std::vector<std::vector<int64_t>>& counts) {
  for (size_t i = 0; i < counts.size(); ++i) {
    if (sharded) sharded->warm_up(i, counts[i]);
    else if (i < cached_tables.size()) cached_tables[i]->warm_up(counts[i]);
  }
}

void EmbeddingTablesImpl::reset_cache_stats() {
  if (sharded) sharded->reset_cache_stats();
  for (auto& bag : cached_tables) bag->reset_stats();
}

CacheStats EmbeddingTablesImpl::cache_stats() const {
  CacheStats s = sharded ? sharded->cache_stats() : CacheStats{};
  for (const auto& bag : cached_tables) s += bag->stats();
  return s;
}

torch::nn::Sequential mlp(int64_t in, const std::vector<int64_t>& widths) {
  torch::nn::Sequential s;
  for (size_t i = 0; i < widths.size(); ++i) {
    s->push_back(torch::nn::Linear(in, widths[i]));
    if (i + 1 < widths.size()) s->push_back(torch::nn::ReLU());
    in = widths[i];
  }
  return s;
}

std::shared_ptr<RecModel> make_rec_model(const RecModelOptions& o) {
  o.validate();
  if (o.kind == "deepfm") return std::make_shared<DeepFm>(o);
  return std::make_shared<Dlrm>(o);
}

}  // namespace colossal::recsys
