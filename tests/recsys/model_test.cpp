// recsys/ models and metrics against plain references.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "recsys/data/synthetic.h"
#include "recsys/metrics.h"
#include "recsys/models/rec_model.h"

namespace recsys_model_test {
using namespace colossal::recsys;

TEST(Metrics, AucEqualsPairCountingWithTies) {
  torch::manual_seed(0);
  auto scores = torch::randint(0, 20, {300}).to(torch::kFloat);  // many ties
  auto labels = (torch::rand({300}) < 0.4).to(torch::kFloat);
  double wins = 0, pairs = 0;
  for (int i = 0; i < 300; ++i)
    for (int j = 0; j < 300; ++j)
      if (labels[i].item<float>() == 1 && labels[j].item<float>() == 0) {
        pairs += 1;
        const float a = scores[i].item<float>(), b = scores[j].item<float>();
        wins += a > b ? 1 : a == b ? 0.5 : 0;
      }
  EXPECT_NEAR(auc(scores, labels), wins / pairs, 1e-12);
  EXPECT_TRUE(std::isnan(auc(scores, torch::zeros({300}))));
  auto logits = torch::randn({300});
  const double expected =
      -(labels * torch::log_sigmoid(logits) + (1 - labels) * torch::log_sigmoid(-logits)).mean().item<double>();
  EXPECT_NEAR(log_loss(logits, labels), expected, 1e-6);
}

TEST(Models, DlrmInteractionAndDeepFmSecondOrderMatchTheirDefinitions) {
  SyntheticOptions so{.samples = 8, .dense = 5, .fields = 3, .table_size = 50};
  const auto data = make_synthetic(so, 0, 8);
  std::vector<int64_t> rows = {0, 1, 2, 3, 4, 5, 6, 7};
  const auto batch = data.batch(rows);
  for (const char* kind : {"dlrm", "deepfm"}) {
    torch::manual_seed(1);
    auto model = make_rec_model({.kind = kind, .dense_features = 5, .table_sizes = {50, 50, 50}, .embedding_dim = 4});
    const auto logits = model->forward(batch);
    EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{8})) << kind;
    EXPECT_TRUE(logits.isfinite().all().item<bool>()) << kind;
    auto loss = torch::binary_cross_entropy_with_logits(logits, batch.labels);
    loss.backward();
    for (const auto& p : model->named_parameters())
      EXPECT_TRUE(p.value().grad().defined()) << kind << " " << p.key() << " got no gradient";
  }
  // FM's identity: 0.5 ((sum v)^2 - sum v^2) = sum over pairs i < j of <v_i, v_j>.
  auto v = torch::randn({2, 4, 3});
  auto sum = v.sum(1);
  auto fm = 0.5 * (sum * sum - (v * v).sum(1)).sum(1);
  auto pairs = torch::zeros({2});
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) pairs += (v.select(1, i) * v.select(1, j)).sum(1);
  EXPECT_TRUE(torch::allclose(fm, pairs, 1e-5, 1e-5));
}

TEST(Models, MeanPoolingAveragesABag) {
  RecModelOptions o;
  o.table_sizes = {10};
  o.pooling = "mean";
  EmbeddingTables tables(std::string("embeddings"), int64_t{3}, o);
  CtrBatch b;
  b.ids = {torch::tensor({1, 2, 7}, torch::kInt64)};
  b.offsets = {torch::tensor({0, 2}, torch::kInt64)};  // sample 0: ids 1, 2; sample 1: id 7
  const auto out = tables->forward(b)[0];
  const auto& w = tables->tables[0]->weight;
  EXPECT_TRUE(torch::allclose(out[0], (w[1] + w[2]) / 2));
  EXPECT_TRUE(torch::allclose(out[1], w[7]));
}

}  // namespace recsys_model_test
