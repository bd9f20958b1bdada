#include "recsys/data/ctr_data.h"

#include <torch/torch.h>

#include "core/common/check.h"

namespace colossal::recsys {

std::vector<int64_t> CtrDataset::table_sizes() const {
  std::vector<int64_t> out;
  for (const auto& f : fields) out.push_back(f.table_size);
  return out;
}

CtrBatch CtrDataset::batch(const std::vector<int64_t>& rows) const {
  CtrBatch b;
  auto index = torch::tensor(rows, torch::kInt64);
  b.dense = dense.index_select(0, index);
  b.labels = labels.index_select(0, index);
  for (const auto& f : fields) {
    std::vector<int64_t> ids, offsets;
    offsets.reserve(rows.size());
    for (int64_t r : rows) {
      offsets.push_back(static_cast<int64_t>(ids.size()));
      ids.insert(ids.end(), f.ids.begin() + f.offsets[r], f.ids.begin() + f.offsets[r + 1]);
    }
    b.ids.push_back(torch::tensor(ids, torch::kInt64));
    b.offsets.push_back(torch::tensor(offsets, torch::kInt64));
  }
  return b;
}

CtrDataset CtrDataset::slice(int64_t begin, int64_t end) const {
  COLOSSAL_CHECK(0 <= begin && begin <= end && end <= size(), "[recsys] slice [", begin, ", ", end, ") of ", size(),
                 " samples");
  CtrDataset out;
  out.dense_names = dense_names;
  out.dense = dense.slice(0, begin, end).clone();
  out.labels = labels.slice(0, begin, end).clone();
  for (const auto& f : fields) {
    SparseField g{f.name, f.table_size, {}, {}};
    g.ids.assign(f.ids.begin() + f.offsets[begin], f.ids.begin() + f.offsets[end]);
    for (int64_t i = begin; i <= end; ++i) g.offsets.push_back(f.offsets[i] - f.offsets[begin]);
    out.fields.push_back(std::move(g));
  }
  return out;
}

void CtrDataset::validate(const std::string& origin) const {
  const int64_t n = size();
  COLOSSAL_CHECK(dense.dim() == 2 && dense.size(0) == n, "[recsys] ", origin, ": ", dense.size(0),
                 " rows of dense features for ", n, " labels");
  COLOSSAL_CHECK(static_cast<int64_t>(dense_names.size()) == dense.size(1), "[recsys] ", origin, ": ",
                 dense_names.size(), " dense feature names for ", dense.size(1), " columns");
  for (const auto& f : fields) {
    COLOSSAL_CHECK(f.samples() == n, "[recsys] ", origin, " field '", f.name, "': ", f.samples(), " samples, expected ", n);
    COLOSSAL_CHECK(f.offsets.front() == 0 && f.offsets.back() == static_cast<int64_t>(f.ids.size()), "[recsys] ",
                   origin, " field '", f.name, "': offsets do not cover its ", f.ids.size(), " ids");
    for (int64_t i = 0; i < n; ++i) {
      COLOSSAL_CHECK(f.offsets[i] <= f.offsets[i + 1], "[recsys] ", origin, " field '", f.name, "' sample ", i,
                     ": offsets go backwards");
      for (int64_t k = f.offsets[i]; k < f.offsets[i + 1]; ++k)
        COLOSSAL_CHECK(f.ids[k] >= 0 && f.ids[k] < f.table_size, "[recsys] ", origin, " field '", f.name,
                       "' sample ", i, ": id ", f.ids[k], " outside its table of ", f.table_size);
    }
  }
}

double CtrDataset::positive_rate() const { return size() ? labels.mean().item<double>() : 0.0; }

}  // namespace colossal::recsys
