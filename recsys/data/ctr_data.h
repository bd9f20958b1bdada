#pragma once
// Click-through data as recommenders consume it: per sample, dense features (floats) and sparse
// features (one bag of ids per field: a single id, or several such as a movie's genres), and a
// 0/1 label. Every field indexes its own embedding table.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colossal::recsys {

/// One sparse field over all samples: the ids of sample i are ids[offsets[i] .. offsets[i+1]).
struct SparseField {
  std::string name;
  int64_t table_size = 0;         // ids are in [0, table_size)
  std::vector<int64_t> ids;
  std::vector<int64_t> offsets;   // samples + 1 entries
  int64_t samples() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

/// A batch: what a model's forward takes.
struct CtrBatch {
  torch::Tensor dense;                 // [B, dense] float
  std::vector<torch::Tensor> ids;      // per field: the concatenated ids of the batch's bags (int64)
  std::vector<torch::Tensor> offsets;  // per field: [B] start of each sample's bag in ids
  torch::Tensor labels;                // [B] float 0/1
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct CtrDataset {
  std::vector<std::string> dense_names;
  torch::Tensor dense;  // [N, dense] float
  std::vector<SparseField> fields;
  torch::Tensor labels;  // [N] float

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  std::vector<int64_t> table_sizes() const;
  /// The samples at `rows`, in that order.
  CtrBatch batch(const std::vector<int64_t>& rows) const;
  /// Samples [begin, end) as a dataset of their own (a split).
  CtrDataset slice(int64_t begin, int64_t end) const;
  /// Throws naming the field and sample when an id is outside its table or offsets do not
  /// run 0..ids.size() in order.
  void validate(const std::string& origin) const;
  /// The positive rate (for a baseline log loss).
  double positive_rate() const;
};

}  // namespace colossal::recsys
