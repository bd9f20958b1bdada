#include "recsys/models/rec_model.h"

#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::recsys {
namespace {

class Dlrm : public RecModel {
 public:
  explicit Dlrm(const RecModelOptions& o) : RecModel("Dlrm") {
    auto bottom_widths = o.bottom_mlp;
    bottom_widths.push_back(o.embedding_dim);
    bottom_ = register_module("bottom", mlp(o.dense_features, bottom_widths));
    tables_ = register_module("embeddings", EmbeddingTables(o.table_sizes, o.embedding_dim, o.pooling));
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

 private:
  torch::nn::Sequential bottom_{nullptr}, top_{nullptr};
  EmbeddingTables tables_{nullptr};
  torch::Tensor pairs_;
};

class DeepFm : public RecModel {
 public:
  explicit DeepFm(const RecModelOptions& o) : RecModel("DeepFm") {
    tables_ = register_module("embeddings", EmbeddingTables(o.table_sizes, o.embedding_dim, o.pooling));
    weights_ = register_module("first_order", EmbeddingTables(o.table_sizes, 1, o.pooling));
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
}

EmbeddingTablesImpl::EmbeddingTablesImpl(const std::vector<int64_t>& sizes, int64_t dim, const std::string& pooling) {
  const auto mode = pooling == "mean" ? torch::nn::EmbeddingBagMode(torch::kMean) : torch::nn::EmbeddingBagMode(torch::kSum);
  auto list = register_module("tables", std::make_shared<torch::nn::Module>("Tables"));
  for (size_t i = 0; i < sizes.size(); ++i) {
    auto t = torch::nn::EmbeddingBag(torch::nn::EmbeddingBagOptions(sizes[i], dim).mode(mode));
    torch::NoGradGuard no_grad;
    // Small, as DLRM's uniform(+-1/sqrt(rows)) : an id seen rarely (or only at test time, after
    // a time split) contributes little until training has moved it.
    const double bound = 1 / std::sqrt(static_cast<double>(sizes[i]));
    t->weight.uniform_(-bound, bound);
    tables.push_back(list->register_module(std::to_string(i), t));
  }
}

std::vector<torch::Tensor> EmbeddingTablesImpl::forward(const CtrBatch& b) {
  COLOSSAL_CHECK(b.ids.size() == tables.size(), "[recsys] a batch of ", b.ids.size(), " sparse fields for ",
                 tables.size(), " embedding tables");
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < tables.size(); ++i) out.push_back(tables[i]->forward(b.ids[i], b.offsets[i]));
  return out;
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
