#include "recsys/metrics.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

#include "core/common/check.h"

namespace colossal::recsys {

double auc(const torch::Tensor& scores, const torch::Tensor& labels) {
  COLOSSAL_CHECK(scores.numel() == labels.numel(), "[auc] ", scores.numel(), " scores for ", labels.numel(), " labels");
  auto s = scores.detach().to(torch::kFloat64).contiguous();
  auto l = labels.detach().to(torch::kFloat64).contiguous();
  const int64_t n = s.numel();
  const double* sp = s.data_ptr<double>();
  const double* lp = l.data_ptr<double>();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return sp[a] < sp[b]; });
  // Mann-Whitney: the positives' rank sum, ties given the mean of their ranks.
  double positive_ranks = 0, positives = 0;
  for (int64_t i = 0; i < n;) {
    int64_t j = i;
    while (j < n && sp[order[j]] == sp[order[i]]) ++j;
    const double mean_rank = (i + 1 + j) / 2.0;
    for (int64_t k = i; k < j; ++k)
      if (lp[order[k]] > 0.5) positive_ranks += mean_rank, positives += 1;
    i = j;
  }
  const double negatives = n - positives;
  if (positives == 0 || negatives == 0) return std::numeric_limits<double>::quiet_NaN();
  return (positive_ranks - positives * (positives + 1) / 2) / (positives * negatives);
}

double log_loss(const torch::Tensor& logits, const torch::Tensor& labels) {
  return torch::binary_cross_entropy_with_logits(logits.detach().to(torch::kFloat64), labels.to(torch::kFloat64))
      .item<double>();
}

}  // namespace colossal::recsys
