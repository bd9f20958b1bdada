#include "recsys/embedding/table_init.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <cmath>

#include "core/common/check.h"

namespace colossal::recsys {

void init_table_slice(torch::Tensor& out, const TableSlice& s) {
  constexpr int64_t kBlock = 8192;  // rows per generator
  const int64_t rows = out.size(0), cols = out.size(1);
  COLOSSAL_CHECK(out.is_contiguous() && out.scalar_type() == torch::kFloat && s.row_begin >= 0 && s.col_begin >= 0 &&
                     s.row_begin + rows <= s.total_rows && s.col_begin + cols <= s.total_dim,
                 "[embedding] init: a slice of ", out.sizes(), " at (", s.row_begin, ", ", s.col_begin,
                 ") does not fit a table of ", s.total_rows, " x ", s.total_dim);
  torch::NoGradGuard no_grad;
  const double bound = 1 / std::sqrt(static_cast<double>(s.total_rows));
  for (int64_t block = s.row_begin / kBlock; block * kBlock < s.row_begin + rows; ++block) {
    const int64_t first = block * kBlock, count = std::min(kBlock, s.total_rows - first);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(s.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(block));
    const auto values = torch::empty({count, s.total_dim}).uniform_(-bound, bound, gen);
    const int64_t lo = std::max(first, s.row_begin), hi = std::min(first + count, s.row_begin + rows);
    out.narrow(0, lo - s.row_begin, hi - lo).copy_(values.narrow(0, lo - first, hi - lo).narrow(1, s.col_begin, cols));
  }
}

}  // namespace colossal::recsys
