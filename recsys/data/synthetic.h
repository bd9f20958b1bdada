#pragma once
// Criteo-shaped synthetic click data for scale: 13 dense features, 26 single-id sparse fields
// with power-law (Zipf) id popularity, any table size. Labels come from a hidden logistic model
// (dense weights plus a per-id weight drawn from a hash of the id), so they can be learned, and
// every sample depends only on the seed and its index: any rank makes any slice.
#include <cstdint>

#include "recsys/data/ctr_data.h"

namespace colossal::recsys {

struct SyntheticOptions {
  int64_t samples = 100000;
  int64_t dense = 13;
  int64_t fields = 26;
  int64_t table_size = 100000;  // rows of every table
  double zipf = 1.05;           // popularity exponent (larger: hotter head)
  uint64_t seed = 0;
  void validate() const;
};

/// Samples [begin, begin + count) of the stream `options` describes.
CtrDataset make_synthetic(const SyntheticOptions& options, int64_t begin, int64_t count);

}  // namespace colossal::recsys
