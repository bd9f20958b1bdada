#pragma once
// The recommenders: a model scores a batch (logits, one per sample; the click probability is
// their sigmoid). DLRM (Naumov et al. 2019): bottom MLP over the dense features, one pooled
// embedding per sparse field, every pairwise dot product among them, top MLP. DeepFM (Guo et
// al. 2017): a factorisation machine (first-order weights, second-order field interactions)
// beside a deep MLP over the same embeddings.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <memory>
#include <string>
#include <vector>

#include "recsys/data/ctr_data.h"

namespace colossal::recsys {

struct RecModelOptions {
  std::string kind = "dlrm";            // dlrm | deepfm
  int64_t dense_features = 13;
  std::vector<int64_t> table_sizes;     // one per sparse field
  int64_t embedding_dim = 16;
  std::vector<int64_t> bottom_mlp = {64};   // DLRM: then a layer to embedding_dim
  std::vector<int64_t> top_mlp = {64, 32};  // DLRM's top, DeepFM's deep part; then a layer to 1
  std::string pooling = "sum";          // sum | mean: how a bag's embeddings combine
  void validate() const;
};

class RecModel : public torch::nn::Module {
 public:
  explicit RecModel(const std::string& name) : torch::nn::Module(name) {}
  /// Logits [B].
  virtual torch::Tensor forward(const CtrBatch& batch) = 0;
};

/// One embedding bag per sparse field (tables named "tables.<field index>.weight").
class EmbeddingTablesImpl : public torch::nn::Module {
 public:
  EmbeddingTablesImpl(const std::vector<int64_t>& sizes, int64_t dim, const std::string& pooling);
  std::vector<torch::Tensor> forward(const CtrBatch& batch);
  std::vector<torch::nn::EmbeddingBag> tables;
};
TORCH_MODULE(EmbeddingTables);

std::shared_ptr<RecModel> make_rec_model(const RecModelOptions& options);

/// Linear layers with ReLU between them: in -> widths... (no activation after the last).
torch::nn::Sequential mlp(int64_t in, const std::vector<int64_t>& widths);

}  // namespace colossal::recsys
