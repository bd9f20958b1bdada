#include "recsys/embedding/embedding_store.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/offload/mapped_tensor.h"
#include "recsys/embedding/cached_embedding.h"
#include "recsys/embedding/table_init.h"

namespace colossal::recsys {

void EmbeddingStoreOptions::validate() const {
  COLOSSAL_CHECK(rows >= 1 && dim >= 1, "[embedding] rows ", rows, ", dim ", dim, ": expected >= 1");
  COLOSSAL_CHECK(cache_ratio > 0 && cache_ratio <= 1, "[embedding] cache_ratio ", cache_ratio, ": expected in (0, 1]");
  COLOSSAL_CHECK(min_slots >= 0, "[embedding] min_slots ", min_slots, ": expected >= 0");
  COLOSSAL_CHECK(eviction == "lfu" || eviction == "lru", "[embedding] eviction '", eviction, "': expected lfu or lru");
  COLOSSAL_CHECK(pooling == "sum" || pooling == "mean", "[embedding] pooling '", pooling, "': expected sum or mean");
  COLOSSAL_CHECK(row_begin >= 0 && col_begin >= 0 && (total_rows == 0 || row_begin + rows <= total_rows) &&
                     (total_dim == 0 || col_begin + dim <= total_dim),
                 "[embedding] a slice of ", rows, " x ", dim, " at (", row_begin, ", ", col_begin,
                 ") outside a table of ", total_rows, " x ", total_dim);
  optimizer.validate();
}

void check_rows(const torch::Tensor& sorted_unique, int64_t rows, const char* who) {
  const int64_t n = sorted_unique.numel();
  const int64_t* r = sorted_unique.data_ptr<int64_t>();
  COLOSSAL_CHECK(n == 0 || (r[0] >= 0 && r[n - 1] < rows), "[", who, "] id ", r[0] < 0 ? r[0] : r[n - 1],
                 " outside the table of ", rows, " rows");
}

EmbeddingStore::EmbeddingStore(EmbeddingStoreOptions options) : options_(std::move(options)) {
  options_.validate();
  if (options_.total_rows == 0) options_.total_rows = options_.rows;
  if (options_.total_dim == 0) options_.total_dim = options_.dim;
}

torch::Tensor EmbeddingStore::allocate(int64_t width, const std::string& what) const {
  if (options_.offload_dir.empty()) return torch::zeros({options_.rows, width});
  return offload::mapped_tensor(options_.offload_dir, {options_.rows, width}, torch::kFloat, what);  // zeros (a new file)
}

void EmbeddingStore::advise(const torch::Tensor& ids) const {
  if (options_.offload_dir.empty()) return;  // host memory: nothing to read ahead
  const auto& t = table();
  const auto flat = ids.to(torch::kInt64).contiguous();
  const int64_t* p = flat.data_ptr<int64_t>();
  const int64_t dim = options_.dim, rows = options_.rows;
  const auto* base = t.data_ptr<float>();
  for (int64_t i = 0; i < flat.numel(); ++i)
    if (p[i] >= 0 && p[i] < rows) offload::prefetch_pages(base + p[i] * dim, dim * static_cast<int64_t>(sizeof(float)));
}

ResidentEmbeddingBag::ResidentEmbeddingBag(EmbeddingStoreOptions options) : EmbeddingStore(std::move(options)) {
  weight_ = allocate(options_.dim, "embedding table");
  init_table_slice(weight_, {.seed = options_.seed, .total_rows = options_.total_rows, .total_dim = options_.total_dim,
                             .row_begin = options_.row_begin, .col_begin = options_.col_begin});
  weight_.set_requires_grad(true);
  state_ = allocate(options_.optimizer.state_width(options_.dim), "embedding optimizer state");
}

torch::Tensor ResidentEmbeddingBag::forward(const torch::Tensor& ids, const torch::Tensor& offsets) {
  const auto flat = ids.to(torch::kInt64).contiguous();
  last_rows_ = std::get<0>(at::_unique(flat));
  check_rows(last_rows_, options_.rows, "embedding");
  return std::get<0>(torch::embedding_bag(weight_, flat, offsets, false, bag_mode(), /*sparse=*/true));
}

torch::Tensor ResidentEmbeddingBag::lookup(const torch::Tensor& ids, const torch::Tensor& offsets) {
  torch::NoGradGuard no_grad;
  const auto flat = ids.to(torch::kInt64).contiguous();
  check_rows(std::get<0>(at::_unique(flat)), options_.rows, "embedding");
  return std::get<0>(torch::embedding_bag(weight_, flat, offsets, false, bag_mode()));
}

std::pair<torch::Tensor, torch::Tensor> ResidentEmbeddingBag::gradients() const {
  COLOSSAL_CHECK(last_rows_.defined(), "[embedding] gradients() before any forward");
  const auto& g = weight_.grad();
  if (!g.defined()) return {last_rows_, torch::zeros({last_rows_.numel(), options_.dim})};  // no backward
  const auto coalesced = g.coalesce();
  return {coalesced.indices()[0].contiguous(), coalesced.values()};
}

std::pair<torch::Tensor, torch::Tensor> EmbeddingStore::checked_updates(const torch::Tensor& ids,
                                                                        const torch::Tensor& grads,
                                                                        const char* who) const {
  auto rows = ids.to(torch::kInt64).contiguous();
  auto g = grads.to(torch::kFloat).contiguous();
  COLOSSAL_CHECK(g.dim() == 2 && g.size(0) == rows.numel() && g.size(1) == options_.dim, "[", who, "] apply: ",
                 rows.numel(), " ids with gradients of shape ", g.sizes());
  const int64_t* r = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < rows.numel(); ++i)
    COLOSSAL_CHECK(r[i] >= 0 && r[i] < options_.rows, "[", who, "] apply: id ", r[i], " outside the table of ",
                   options_.rows, " rows");
  return {rows, g};
}

void ResidentEmbeddingBag::apply(const torch::Tensor& ids, const torch::Tensor& grads) {
  torch::NoGradGuard no_grad;
  const auto [rows, g] = checked_updates(ids, grads, "embedding");
  const int64_t dim = options_.dim, width = state_.size(1);
  const int64_t* r = rows.data_ptr<int64_t>();
  const float* gp = g.data_ptr<float>();
  float* w = weight_.data_ptr<float>();
  float* s = state_.data_ptr<float>();
  for (int64_t i = 0; i < rows.numel(); ++i)
    update_row(options_.optimizer, w + r[i] * dim, s + r[i] * width, gp + i * dim, dim);
  weight_.mutable_grad() = torch::Tensor();
}

std::unique_ptr<EmbeddingStore> make_embedding_store(const EmbeddingStoreOptions& options, bool cached) {
  if (cached) return std::make_unique<CachedEmbeddingBag>(options);
  return std::make_unique<ResidentEmbeddingBag>(options);
}

}  // namespace colossal::recsys
